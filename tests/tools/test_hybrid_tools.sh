#!/bin/sh
# pi-run and pi-bench with hybrid CPU/device execution, using --device cpu (a second CPU
# backend acting as the device), so no GPU is needed:
#  - --print-plan --dry-run prints a plan for the committed fixtures (a PowerInfer
#    ReLU-Llama and a dense Llama; they have no tokenizer, so only dry runs);
#  - on a tiny synthetic PowerInfer model and its dense twin (with a tokenizer, made by
#    tools/bench/make_synthetic_powerinfer.py) generation at budgets 0, small and huge,
#    and with a statistics file ranking the neurons, gives the same greedy text as
#    without a device;
#  - the default plan cache MODEL.generated.gpuidx is written next to a copy of the
#    model in WORK_DIR (never in the source tree) and reused the second time;
#    --reset-plan rewrites it, another budget replans;
#  - --plan of a missing or garbage file fails with a message and a non-zero exit;
#    bad options exit 2; --device gpu either runs or fails cleanly;
#  - a mixture-of-experts fixture: experts placed by --profile statistics, the same
#    text at any budget, --print-plan's expert lists, the plan cache;
#  - pi-bench --device cpu --vram-budget 0,1 runs one row per budget;
#  - pi-perplexity and pi-batched take the same options: the same perplexity and the
#    same texts at any budget, their plan line, --dry-run, bad options exit 2.
# Args: PI_RUN PI_BENCH SOURCE_ROOT WORK_DIR PI_PERPLEXITY PI_BATCHED
set -u
pirun=$1
bench=$2
root=$3
work=$4/hybrid-tools-test
ppl=$5
batched=$6
rm -rf "$work"
mkdir -p "$work"
pass=0
fail=0
ok() { pass=$((pass + 1)); printf 'ok - %s\n' "$1"; }
bad() { fail=$((fail + 1)); printf 'not ok - %s\n' "$1"; }
expect() { # NAME FILE PATTERN
    if grep -q -- "$3" "$2"; then ok "$1: $3"; else bad "$1: '$3' not in output"; sed 's/^/#   /' "$2"; fi
}
# exit status NAME WANT STATUS FILE: WANT is a number, or "fail" for 1..125 (an error
# exit, not a signal)
status() {
    case $2 in
        fail) if [ "$3" -ge 1 ] && [ "$3" -le 125 ]; then ok "$1 exits $3"; else bad "$1 exits $3 (want an error exit)"; sed 's/^/#   /' "$4"; fi ;;
        *) if [ "$3" -eq "$2" ]; then ok "$1 exits $2"; else bad "$1 exits $3 (want $2)"; sed 's/^/#   /' "$4"; fi ;;
    esac
}

# ---- dry runs on the committed fixtures (copied: a plan cache lands next to the model)
cp "$root/tests/fixtures/sparse/relu-llama.q4_0.gguf" "$work/fx-sparse.gguf"
cp "$root/tests/fixtures/models/tiny-silu-gqa.q8_0.gguf" "$work/fx-dense.gguf"
for m in fx-sparse fx-dense; do
    "$pirun" -m "$work/$m.gguf" --device cpu --vram-budget 0.0001 --print-plan --dry-run \
        > "$work/$m.plan" 2> "$work/$m.plan.err"
    status "$m: --print-plan --dry-run" 0 $? "$work/$m.plan.err"
    expect "$m dry run" "$work/$m.plan" "budget"
    expect "$m dry run" "$work/$m.plan.err" "plan (device cpu 0): planned now"
    "$pirun" -m "$work/$m.gguf" --device cpu --vram-budget 0 --dry-run --no-plan-cache \
        > "$work/$m.plan0" 2> "$work/$m.plan0.err"
    status "$m: budget 0 dry run" 0 $? "$work/$m.plan0.err"
    expect "$m budget 0" "$work/$m.plan0.err" "on device 0 B of 0 B budget | FFN neurons 0/"
    "$pirun" -m "$work/$m.gguf" --device cpu --vram-budget 1000 --dry-run --no-plan-cache \
        > "$work/$m.planbig" 2> "$work/$m.planbig.err"
    status "$m: huge budget dry run" 0 $? "$work/$m.planbig.err"
    expect "$m huge budget" "$work/$m.planbig.err" "(100.0%) | attention \([0-9]*\)/\1 layers, output yes, KV cache yes"
done

# ---- generation: same greedy text with the device at any budget --------------------
python3 "$root/tools/bench/make_synthetic_powerinfer.py" --preset tiny -o "$work/m" > "$work/gen.txt" 2>&1 \
    && ok "synthetic model written" || { bad "synthetic model"; cat "$work/gen.txt"; echo "1..$((pass + fail))"; exit 1; }
for kind in powerinfer dense; do
    model=$work/m.$kind.gguf
    "$pirun" -m "$model" -p "a b c" -n 12 --temp 0 -t 2 > "$work/$kind.ref.txt" 2> "$work/$kind.ref.err"
    status "$kind: CPU-only run" 0 $? "$work/$kind.ref.err"
    for b in 0 0.004 1000; do
        "$pirun" -m "$model" -p "a b c" -n 12 --temp 0 -t 2 --device cpu --vram-budget $b \
            --no-plan-cache > "$work/$kind.$b.txt" 2> "$work/$kind.$b.err"
        status "$kind: --device cpu --vram-budget $b" 0 $? "$work/$kind.$b.err"
        cmp -s "$work/$kind.ref.txt" "$work/$kind.$b.txt" && ok "$kind: budget $b gives the CPU-only text" \
            || { bad "$kind: budget $b text differs"; diff "$work/$kind.ref.txt" "$work/$kind.$b.txt" | sed 's/^/#   /'; }
        expect "$kind budget $b" "$work/$kind.$b.err" "pi-run: plan (device cpu 0): planned now (not cached)"
    done
done
expect "huge budget" "$work/powerinfer.1000.err" "(100.0%) | attention 4/4 layers"
expect "budget 0" "$work/powerinfer.0.err" "on device 0 B of 0 B budget"
"$pirun" -m "$work/m.powerinfer.gguf" -p "a b c" -n 12 --temp 0 -t 2 --device cpu --vram-budget 0.004 \
    --no-plan-cache --print-plan > "$work/print.txt" 2> "$work/print.err"
status "--print-plan while generating" 0 $? "$work/print.err"
expect "--print-plan" "$work/print.err" "budget"
cmp -s "$work/powerinfer.ref.txt" "$work/print.txt" && ok "--print-plan leaves stdout to the text" \
    || bad "--print-plan changed stdout"

# statistics ranking the neurons
printf 'one two three four five six seven eight nine ten' > "$work/prompt.txt"
"$pirun" -m "$work/m.powerinfer.gguf" -f "$work/prompt.txt" -n 4 -t 2 --profile "$work/act.gguf" \
    > /dev/null 2> "$work/profile.err"
status "--profile" 0 $? "$work/profile.err"
"$pirun" -m "$work/m.powerinfer.gguf" -p "a b c" -n 12 --temp 0 -t 2 --device cpu --vram-budget 0.004 \
    --no-plan-cache --plan-stats "$work/act.gguf" > "$work/stats.txt" 2> "$work/stats.err"
status "--plan-stats" 0 $? "$work/stats.err"
cmp -s "$work/powerinfer.ref.txt" "$work/stats.txt" && ok "--plan-stats gives the CPU-only text" \
    || bad "--plan-stats text differs"
"$pirun" -m "$work/m.powerinfer.gguf" -p "a" -n 1 --device cpu --plan-stats "$work/missing.gguf" \
    > "$work/nostats.txt" 2>&1
status "--plan-stats of a missing file" 1 $? "$work/nostats.txt"
expect "missing statistics" "$work/nostats.txt" "cannot read the activation statistics"

# ---- the plan cache: written next to the model, reused, reset, replanned ------------
mkdir -p "$work/cache"
cp "$work/m.powerinfer.gguf" "$work/cache/m.gguf"
cached=$work/cache/m.gguf.generated.gpuidx
run_cached() { # NAME EXTRA-ARGS...
    name=$1
    shift
    "$pirun" -m "$work/cache/m.gguf" -p "a b c" -n 12 --temp 0 -t 2 --device cpu "$@" \
        > "$work/cache/$name.txt" 2> "$work/cache/$name.err"
    status "plan cache: $name" 0 $? "$work/cache/$name.err"
    cmp -s "$work/powerinfer.ref.txt" "$work/cache/$name.txt" && ok "plan cache: $name gives the CPU-only text" \
        || bad "plan cache: $name text differs"
}
run_cached first --vram-budget 0.004
[ -s "$cached" ] && ok "plan cache written next to the model copy" || bad "no $cached"
expect "first run" "$work/cache/first.err" "planned now, written to $cached"
run_cached second --vram-budget 0.004
expect "second run" "$work/cache/second.err" "neurons read from $cached"
run_cached reset --vram-budget 0.004 --reset-plan
expect "--reset-plan" "$work/cache/reset.err" "planned now, written to $cached"
run_cached other --vram-budget 0.005
expect "another budget" "$work/cache/other.err" "planned now, written to $cached"
cp "$cached" "$work/saved.gpuidx"
run_cached explicit --vram-budget 0.005 --plan "$work/saved.gpuidx"
expect "--plan FILE" "$work/cache/explicit.err" "neurons read from $work/saved.gpuidx"
"$pirun" -m "$work/cache/m.gguf" --device cpu --vram-budget 0.005 --dry-run > /dev/null 2> "$work/cache/dry.err"
status "dry run with the cache" 0 $? "$work/cache/dry.err"
expect "dry run with the cache" "$work/cache/dry.err" "neurons read from $cached"
left=$(find "$root/tests" "$root/tools" -name '*.generated.gpuidx' 2>/dev/null | head -3)
[ -z "$left" ] && ok "no plan cache written into the source tree" || bad "plan caches in the source tree: $left"

# ---- errors ---------------------------------------------------------------------------
"$pirun" -m "$work/m.powerinfer.gguf" -p "a" -n 2 --device cpu --plan "$work/missing.gpuidx" \
    > "$work/missing.txt" 2>&1
status "--plan of a missing file" fail $? "$work/missing.txt"
expect "--plan missing" "$work/missing.txt" "pi-run: cannot create a context: "
expect "--plan missing" "$work/missing.txt" "missing.gpuidx"
head -c 3000 "$work/m.powerinfer.gguf" | tail -c 1000 > "$work/garbage.gpuidx"
"$pirun" -m "$work/m.powerinfer.gguf" -p "a" -n 2 --device cpu --plan "$work/garbage.gpuidx" \
    > "$work/garbage.txt" 2>&1
status "--plan of a garbage file" fail $? "$work/garbage.txt"
expect "--plan garbage" "$work/garbage.txt" "pi-run: cannot create a context: "
"$pirun" -m "$work/m.powerinfer.gguf" --device cpu --plan "$work/garbage.gpuidx" --dry-run \
    > "$work/garbage-dry.txt" 2>&1
status "--dry-run --plan of a garbage file" fail $? "$work/garbage-dry.txt"
expect "--dry-run --plan garbage" "$work/garbage-dry.txt" "pi-run: cannot plan: "
"$pirun" -m "$work/fx-dense.gguf" --device cpu --plan "$work/saved.gpuidx" --dry-run \
    > "$work/other-model.txt" 2>&1
status "--plan of another model's file" fail $? "$work/other-model.txt"
"$pirun" -m "$work/m.powerinfer.gguf" -p "a" --print-plan > "$work/nodev.txt" 2>&1
status "--print-plan without a device" 2 $? "$work/nodev.txt"
expect "no device" "$work/nodev.txt" "needs a device"
"$pirun" -m "$work/m.powerinfer.gguf" -p "a" --device tpu > "$work/tpu.txt" 2>&1
status "--device tpu" 2 $? "$work/tpu.txt"
"$pirun" -m "$work/m.powerinfer.gguf" -p "a" --vram-budget lots > "$work/lots.txt" 2>&1
status "--vram-budget lots" 2 $? "$work/lots.txt"
"$pirun" -m "$work/m.powerinfer.gguf" -p "a" --device cpu --no-plan-cache --reset-plan > "$work/contra.txt" 2>&1
status "--no-plan-cache with --reset-plan" 2 $? "$work/contra.txt"
# A GPU: runs where the library has one and a device answers, else a clean error.
"$pirun" -m "$work/m.powerinfer.gguf" -p "a b c" -n 4 --temp 0 -t 2 --vram-budget 0.005 --no-plan-cache \
    > "$work/gpu.txt" 2> "$work/gpu.err"
rc=$?
if [ $rc -eq 0 ]; then
    expect "--vram-budget (gpu)" "$work/gpu.err" "plan (device gpu 0)"
elif [ $rc -eq 1 ]; then
    expect "--vram-budget without a GPU" "$work/gpu.err" "pi-run: cannot create a context: "
else
    bad "--vram-budget (gpu) exits $rc"
    sed 's/^/#   /' "$work/gpu.err"
fi

# ---- mixture of experts: experts as the planner's units ------------------------------
# The qwen3moe fixture (2 layers of 8 experts, 2 chosen): statistics from --profile rank
# the experts; the same greedy text at budgets with no, some and all experts on the
# device; --print-plan lists each layer's device experts; the plan cache is keyed by
# the expert statistics.
cp "$root/tests/fixtures/archs/qwen3moe.f16.gguf" "$work/moe.gguf"
"$pirun" -m "$work/moe.gguf" -p "a b c" -n 8 --temp 0 -t 2 > "$work/moe.ref.txt" 2> "$work/moe.ref.err"
status "moe: CPU-only run" 0 $? "$work/moe.ref.err"
"$pirun" -m "$work/moe.gguf" -f "$work/prompt.txt" -n 4 -t 2 --profile "$work/moe-act.gguf" \
    > /dev/null 2> "$work/moe-profile.err"
status "moe: --profile" 0 $? "$work/moe-profile.err"
for b in 0 0.003 1000; do
    "$pirun" -m "$work/moe.gguf" -p "a b c" -n 8 --temp 0 -t 2 --device cpu --vram-budget $b \
        --no-plan-cache --plan-stats "$work/moe-act.gguf" > "$work/moe.$b.txt" 2> "$work/moe.$b.err"
    status "moe: --device cpu --vram-budget $b" 0 $? "$work/moe.$b.err"
    cmp -s "$work/moe.ref.txt" "$work/moe.$b.txt" && ok "moe: budget $b gives the CPU-only text" \
        || { bad "moe: budget $b text differs"; diff "$work/moe.ref.txt" "$work/moe.$b.txt" | sed 's/^/#   /'; }
done
expect "moe budget 1000" "$work/moe.1000.err" "| experts 16 on the device"
expect "moe some" "$work/moe.0.003.err" "| experts [1-9][0-9]* on the device"
if grep -q "| experts 16 on the device" "$work/moe.0.003.err"; then bad "moe: budget 0.003 places every expert"; else ok "moe: budget 0.003 places some experts"; fi
"$pirun" -m "$work/moe.gguf" --device cpu --vram-budget 0.003 --plan-stats "$work/moe-act.gguf" \
    --no-plan-cache --print-plan --dry-run > "$work/moe.plan" 2> "$work/moe.plan.err"
status "moe: --print-plan --dry-run" 0 $? "$work/moe.plan.err"
expect "moe plan" "$work/moe.plan" "experts .* MiB  [0-9]*/16 experts"
expect "moe plan" "$work/moe.plan" "layer  attn  pred  norm  experts on the device"
expect "moe plan" "$work/moe.plan" "^      0  dev   -     dev   [0-9]/8 experts"
mkdir -p "$work/moecache"
cp "$work/moe.gguf" "$work/moecache/m.gguf"
for run in first second; do
    "$pirun" -m "$work/moecache/m.gguf" --device cpu --vram-budget 0.003 --plan-stats "$work/moe-act.gguf" \
        --dry-run > "$work/moecache/$run.plan" 2> "$work/moecache/$run.err"
    status "moe plan cache: $run" 0 $? "$work/moecache/$run.err"
done
expect "moe plan cache" "$work/moecache/first.err" "planned now, written to"
expect "moe plan cache" "$work/moecache/second.err" "neurons read from"
tail -n +2 "$work/moecache/first.plan" > "$work/moecache/first.body"
tail -n +2 "$work/moecache/second.plan" > "$work/moecache/second.body"
cmp -s "$work/moecache/first.body" "$work/moecache/second.body" && ok "moe plan cache: the same experts" \
    || bad "moe plan cache: the plans differ"
"$pirun" -m "$work/moecache/m.gguf" --device cpu --vram-budget 0.003 --dry-run \
    > /dev/null 2> "$work/moecache/nostats.err"
expect "moe plan cache without statistics" "$work/moecache/nostats.err" "planned now, written to"

# ---- pi-bench -------------------------------------------------------------------------
"$bench" -m "$work/m.powerinfer.gguf" -t 2 -p 8 -n 4 -r 1 --no-bandwidth --device cpu --vram-budget 0,1 \
    > "$work/bench.txt" 2>&1
status "pi-bench --device cpu --vram-budget 0,1" 0 $? "$work/bench.txt"
expect bench "$work/bench.txt" "| budget   | neurons | GiB dev |"
expect bench "$work/bench.txt" "| sparse | tg4 .*0.00 GiB | *0.0% | *0.000 |"
expect bench "$work/bench.txt" "| sparse | tg4 .*1.00 GiB | *100.0% |"
expect bench "$work/bench.txt" "decode speed-up sparse, 1.00 GiB / sparse, 0.00 GiB"
"$bench" -m "$work/m.powerinfer.gguf" -p 4 -n 2 -r 1 --no-bandwidth --vram-budget x > "$work/bench2.txt" 2>&1
status "pi-bench --vram-budget x" 2 $? "$work/bench2.txt"

# ---- pi-perplexity and pi-batched ----------------------------------------------------
# a text of a few hundred tokens for the synthetic model's byte-level vocabulary
i=0
: > "$work/ppl.txt"
while [ $i -lt 40 ]; do printf 'one two three four five six seven eight nine ten ' >> "$work/ppl.txt"; i=$((i + 1)); done
for kind in powerinfer dense; do
    model=$work/m.$kind.gguf
    "$ppl" -m "$model" -f "$work/ppl.txt" -c 64 --chunks 3 -t 2 > "$work/ppl.$kind.ref" 2> "$work/ppl.$kind.ref.err"
    status "pi-perplexity $kind: CPU only" 0 $? "$work/ppl.$kind.ref.err"
    grep '^Final estimate' "$work/ppl.$kind.ref" > "$work/ppl.$kind.ref.final"
    "$batched" -m "$model" -p "a b c" -n 8 --parallel 3 -t 2 --no-sequential         > "$work/bat.$kind.ref" 2> "$work/bat.$kind.ref.err"
    status "pi-batched $kind: CPU only" 0 $? "$work/bat.$kind.ref.err"
    for b in 0 0.004 1000; do
        "$ppl" -m "$model" -f "$work/ppl.txt" -c 64 --chunks 3 -t 2 --device cpu --vram-budget $b \
            --no-plan-cache > "$work/ppl.$kind.$b" 2> "$work/ppl.$kind.$b.err"
        status "pi-perplexity $kind --device cpu --vram-budget $b" 0 $? "$work/ppl.$kind.$b.err"
        expect "pi-perplexity $kind budget $b" "$work/ppl.$kind.$b.err" "pi-perplexity: plan (device cpu 0): planned now (not cached)"
        grep '^Final estimate' "$work/ppl.$kind.$b" > "$work/ppl.$kind.$b.final"
        cmp -s "$work/ppl.$kind.ref.final" "$work/ppl.$kind.$b.final" \
            && ok "pi-perplexity $kind: budget $b gives the CPU-only perplexity" \
            || { bad "pi-perplexity $kind: budget $b perplexity differs"; cat "$work/ppl.$kind.ref.final" "$work/ppl.$kind.$b.final" | sed 's/^/#   /'; }
        "$batched" -m "$model" -p "a b c" -n 8 --parallel 3 -t 2 --no-sequential --device cpu \
            --vram-budget $b --no-plan-cache > "$work/bat.$kind.$b" 2> "$work/bat.$kind.$b.err"
        status "pi-batched $kind --device cpu --vram-budget $b" 0 $? "$work/bat.$kind.$b.err"
        expect "pi-batched $kind budget $b" "$work/bat.$kind.$b.err" "pi-batched: plan (device cpu 0): planned now (not cached)"
        cmp -s "$work/bat.$kind.ref" "$work/bat.$kind.$b" \
            && ok "pi-batched $kind: budget $b gives the CPU-only texts" \
            || { bad "pi-batched $kind: budget $b texts differ"; diff "$work/bat.$kind.ref" "$work/bat.$kind.$b" | sed 's/^/#   /'; }
    done
done
expect "pi-perplexity huge budget" "$work/ppl.powerinfer.1000.err" "(100.0%) | attention 4/4 layers"
expect "pi-batched huge budget" "$work/bat.powerinfer.1000.err" "(100.0%) | attention 4/4 layers"
# the plan counts every sequence's KV cache: 3 sequences hold 3 times one's
kv_of() { sed -n 's/^  kv cache *\([0-9.]*\) MiB.*/\1/p' "$1"; }
"$batched" -m "$work/m.dense.gguf" -p "a b c" -n 200 --parallel 1 --device cpu --vram-budget 1000 \
    --no-plan-cache --dry-run > "$work/bat.dry1" 2> "$work/bat.dry1.err"
status "pi-batched --dry-run (1 sequence)" 0 $? "$work/bat.dry1.err"
"$batched" -m "$work/m.dense.gguf" -p "a b c" -n 200 --parallel 4 --device cpu --vram-budget 1000 \
    --no-plan-cache --dry-run > "$work/bat.dry4" 2> "$work/bat.dry4.err"
status "pi-batched --dry-run (4 sequences)" 0 $? "$work/bat.dry4.err"
k1=$(kv_of "$work/bat.dry1")
k4=$(kv_of "$work/bat.dry4")
if [ -n "$k1" ] && [ -n "$k4" ] && awk -v a="$k1" -v b="$k4" 'BEGIN { d = b - 4 * a; exit !(a > 0 && d < 0.05 && d > -0.05) }'; then
    ok "pi-batched plan: 4 sequences hold 4 times the KV cache of one ($k1 -> $k4 MiB)"
else
    bad "pi-batched plan KV cache: 1 sequence '$k1' MiB, 4 sequences '$k4' MiB"
    sed 's/^/#   /' "$work/bat.dry4"
fi
"$ppl" -m "$work/m.dense.gguf" -c 64 --device cpu --vram-budget 0.004 --no-plan-cache --dry-run \
    > "$work/ppl.dry" 2> "$work/ppl.dry.err"
status "pi-perplexity --dry-run (no text needed)" 0 $? "$work/ppl.dry.err"
expect "pi-perplexity --dry-run" "$work/ppl.dry" "budget"
"$ppl" -m "$work/m.dense.gguf" -f "$work/ppl.txt" --print-plan > "$work/ppl.nodev" 2>&1
status "pi-perplexity --print-plan without a device" 2 $? "$work/ppl.nodev"
expect "pi-perplexity no device" "$work/ppl.nodev" "pi-perplexity: --print-plan needs a device"
"$batched" -m "$work/m.dense.gguf" -p "a" -n 2 --parallel 2 --vram-budget lots > "$work/bat.lots" 2>&1
status "pi-batched --vram-budget lots" 2 $? "$work/bat.lots"
"$batched" -m "$work/m.dense.gguf" -p "a" -n 2 --parallel 2 --device cpu --plan-stats "$work/missing.gguf" \
    > "$work/bat.nostats" 2>&1
status "pi-batched --plan-stats of a missing file" 1 $? "$work/bat.nostats"

echo "1..$((pass + fail))"
[ "$fail" -eq 0 ]
