#!/bin/sh
# tests/gpu/compare.sh without a GPU: PI_CMP_DEVICE=cpu (our CPU stand-in device, VRAM
# estimated from the plan) on the tiny preset, with ik_llama.cpp's llama-bench from
# ../shared/anchors when it is there, else a stand-in printing llama-bench's table (so
# only our side is real). Checks: exit 0, one table row per budget, our figures and the
# llama.cpp figures parsed, -ngl within [0, n_layer], ratios computed; bad settings fail.
# Args: PI_BENCH SOURCE_ROOT WORK_DIR
set -u
bench=$1
root=$2
work=$3/gpu-compare-test
rm -rf "$work"
mkdir -p "$work"
pass=0
fail=0
ok() { pass=$((pass + 1)); printf 'ok - %s\n' "$1"; }
bad() { fail=$((fail + 1)); printf 'not ok - %s\n' "$1"; }

anchors=$root/../shared/anchors/run
# the anchors are built with -march=native for one machine kind: on another CPU their
# --help may work while a real run dies with SIGILL, so they are probed on the tiny dense
# twin (generated here as compare.sh would, which then reuses it)
usable_anchors() {
    [ -z "${PI_TEST_NO_ANCHORS:-}" ] && [ -x "$anchors" ] || return 1
    mkdir -p "$work/models"
    python3 "$root/tools/bench/make_synthetic_powerinfer.py" --preset tiny --type q4_0 \
        --unique-layers 2 -o "$work/models/synth-tiny" > "$work/gen-probe.txt" 2>&1 || return 1
    "$anchors" ik llama-bench -m "$work/models/synth-tiny.dense.gguf" -t 1 -p 0 -n 1 -r 1 -o md \
        > "$work/probe.txt" 2>&1
}
if usable_anchors; then
    ll="$anchors ik llama-bench"
    what="ik_llama.cpp"
else
    cat > "$work/fake-llama-bench" <<'FAKE'
#!/bin/sh
echo "| model | size | params | backend | threads | test | t/s |"
echo "| --- | ---: | ---: | --- | ---: | ---: | ---: |"
echo "| llama ?B Q4_0 | 2.56 MiB | 4.75 M | CPU | 2 | pp64 | 1000.00 ± 1.00 |"
echo "| llama ?B Q4_0 | 2.56 MiB | 4.75 M | CPU | 2 | tg32 | 500.00 ± 1.00 |"
FAKE
    chmod +x "$work/fake-llama-bench"
    ll=$work/fake-llama-bench
    what="a llama-bench stand-in"
fi
PI_CMP_DEVICE=cpu PI_CMP_PRESETS=tiny PI_CMP_FRACTIONS="0.25 0.5 0.75" PI_CMP_T=2 PI_CMP_R=1 \
    PI_CMP_P=16 PI_CMP_N=8 PI_CMP_DIR="$work/models" PI_CMP_LOG="$work/log" PI_CMP_PI_BENCH="$bench" \
    LLAMA_BENCH="$ll" sh "$root/tests/gpu/compare.sh" "$work" > "$work/out.txt" 2> "$work/err.txt"
rc=$?
[ $rc -eq 0 ] && ok "compare.sh with the CPU stand-in and $what exits 0" ||
    { bad "compare.sh exits $rc"; sed 's/^/#   /' "$work/err.txt" | tail -20; }
rows=$(grep -c '^| tiny | ' "$work/out.txt")
[ "$rows" -eq 3 ] && ok "one row per budget" || { bad "$rows rows, want 3"; sed 's/^/#   /' "$work/out.txt"; }
grep '^| tiny | ' "$work/out.txt" | while IFS='|' read -r _ model budget ov opp otg ngl lv lpp ltg rtg rpp _; do
    ok=1
    for v in "$opp" "$otg" "$lpp" "$ltg" "$rtg" "$rpp"; do
        echo "$v" | grep -Eq '^ *[0-9]+(\.[0-9]+)? *$' || ok=0
    done
    n=$(echo "$ngl" | sed 's|/.*||; s/ //g') L=$(echo "$ngl" | sed 's|.*/||; s/ //g')
    [ "$n" -ge 0 ] && [ "$n" -le "$L" ] || ok=0
    [ $ok = 1 ] && echo "ok - row$budget: figures parsed, -ngl $n of $L" ||
        echo "not ok - row$budget: '$opp|$otg|$ngl|$lpp|$ltg|$rtg|$rpp'"
done > "$work/rows.tap"
cat "$work/rows.tap"
pass=$((pass + $(grep -c '^ok' "$work/rows.tap")))
fail=$((fail + $(grep -c '^not ok' "$work/rows.tap")))
[ -s "$work/log/table.md" ] && ok "the table is written to the log" || bad "no table.md"
# the mixture-of-experts comparison, on a tiny qwen3moe file
PI_CMP_DEVICE=cpu PI_CMP_PRESETS=none PI_CMP_MOE=qwen3moe PI_CMP_MOE_LAYERS=2 \
    PI_CMP_MOE_ARGS="--n-embd 256 --n-head 4 --n-head-kv 2 --n-ff-exp 128 --n-expert 8 --n-expert-used 2 --n-vocab 1024" \
    PI_CMP_FRACTIONS="0.25 0.75" PI_CMP_T=2 PI_CMP_R=1 PI_CMP_P=16 PI_CMP_N=8 PI_CMP_DIR="$work/models" \
    PI_CMP_LOG="$work/log-moe" PI_CMP_PI_BENCH="$bench" LLAMA_BENCH="$ll" \
    sh "$root/tests/gpu/compare.sh" "$work" > "$work/moe.txt" 2> "$work/moe.err"
rc=$?
[ $rc -eq 0 ] && ok "compare.sh PI_CMP_MOE=qwen3moe exits 0" ||
    { bad "compare.sh PI_CMP_MOE exits $rc"; sed 's/^/#   /' "$work/moe.err" | tail -20; }
grep -q "^## Mixture of experts" "$work/moe.txt" && ! grep -q "^## Hybrid decode" "$work/moe.txt" &&
    ok "PI_CMP_PRESETS=none: only the mixture-of-experts table" || bad "tables of the MoE run"
mrows=$(grep -cE '^\| 0\.[0-9]+ GiB \(0\.(25|75)\) \| .* \| [0-9]+/2 \| .* \| [0-9.]+ \| [0-9.]+ \|$' "$work/moe.txt")
[ "$mrows" -eq 2 ] && ok "one MoE row per budget with --n-cpu-moe of 2 layers and both ratios" ||
    { bad "$mrows MoE rows"; sed 's/^/#   /' "$work/moe.txt"; }
PI_CMP_DEVICE=tpu sh "$root/tests/gpu/compare.sh" "$work" > "$work/bad.txt" 2>&1
[ $? -eq 2 ] && ok "PI_CMP_DEVICE=tpu exits 2" || bad "PI_CMP_DEVICE=tpu"
echo "1..$((pass + fail))"
[ "$fail" -eq 0 ]
