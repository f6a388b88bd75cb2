#!/bin/sh
# tests/gpu/compare.sh BIN -- the headline comparison: our hybrid CPU/GPU decode and
# prefill of a PowerInfer file against llama.cpp's -ngl offload of its dense twin, at the
# same VRAM, on one GPU machine. Builds nothing there (docs/gpu.md says how BIN is made
# here: tests/gpu/pack.sh with llama.cpp from tests/gpu/build_llamacpp.sh).
#
# For each preset (default 7b and 13b shapes, from tools/bench/make_synthetic_powerinfer.py
# with --unique-layers 2, so that generating them takes about a minute), for VRAM budgets
# that hold 25%, 50% and 75% of the PowerInfer file (an 8-24 GB consumer GPU's share of a
# 13B-70B model):
#   1. ours: pi-bench --vram-budget B on the PowerInfer file (sparse, the planner places
#      attention, KV cache and the hottest neurons), its peak VRAM measured (nvidia-smi's
#      memory.used over the run, less the idle figure);
#   2. llama.cpp: llama-bench on the dense twin with the largest -ngl whose measured peak
#      VRAM is at most ours (first guessed from the layer bytes and llama.cpp's measured
#      VRAM at -ngl 0, then measured, and lowered while it is over);
# and prints one markdown table (also written to $PI_CMP_LOG/table.md).
#
# BIN: a directory with pi-bench and libpowerinfer.so* (a CUDA build) and llamacpp/ with
# llama-bench and its libraries, or those packed as llamacpp.tar.xz (tests/gpu/pack.sh). PI_CMP_DEVICE=cpu runs the same steps with our CPU
# stand-in device and any llama-bench (LLAMA_BENCH, e.g. "../shared/anchors/run ik
# llama-bench"), VRAM estimated instead of measured: for checking this script without a
# GPU (tests/tools/test_gpu_compare.sh does, on a tiny model).
# PI_CMP_MOE=qwen3moe adds the mixture-of-experts comparison (ours against llama.cpp's
# --n-cpu-moe; see below); PI_CMP_PRESETS=none leaves the dense pairs out.
# Environment (defaults): PI_CMP_PRESETS ("7b 13b"), PI_CMP_FRACTIONS ("0.25 0.5 0.75"),
# PI_CMP_P (64), PI_CMP_N (32), PI_CMP_R (2), PI_CMP_T (all processors), PI_CMP_DIR (where
# the models go, $TMPDIR/pi-cmp), PI_CMP_LOG ($TMPDIR/pi-cmp-log), PI_CMP_PI_BENCH,
# LLAMA_BENCH (commands overriding BIN's).
set -u
here=$(cd "$(dirname "$0")/../.." && pwd)
bin=${1:?usage: compare.sh BIN}
dev=${PI_CMP_DEVICE:-gpu}
presets=${PI_CMP_PRESETS:-7b 13b}
fractions=${PI_CMP_FRACTIONS:-0.25 0.5 0.75}
P=${PI_CMP_P:-64} N=${PI_CMP_N:-32} R=${PI_CMP_R:-2}
T=${PI_CMP_T:-$(nproc 2>/dev/null || echo 4)}
mdir=${PI_CMP_DIR:-${TMPDIR:-/tmp}/pi-cmp}
log=${PI_CMP_LOG:-${TMPDIR:-/tmp}/pi-cmp-log}
mkdir -p "$mdir" "$log"
export LD_LIBRARY_PATH="$bin${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
pibench=${PI_CMP_PI_BENCH:-$bin/pi-bench}
if [ -z "${LLAMA_BENCH:-}" ] && [ ! -x "$bin/llamacpp/llama-bench" ] && [ -f "$bin/llamacpp.tar.xz" ]; then
    mkdir -p "$mdir/llamacpp" && tar -xJf "$bin/llamacpp.tar.xz" -C "$mdir/llamacpp" ||
        { echo "compare.sh: cannot unpack $bin/llamacpp.tar.xz" >&2; exit 1; }
    llbench=$mdir/llamacpp/llama-bench
    export LD_LIBRARY_PATH="$mdir/llamacpp:$LD_LIBRARY_PATH"
else
    llbench=${LLAMA_BENCH:-$bin/llamacpp/llama-bench}
fi
case $dev in gpu|cpu) ;; *) echo "compare.sh: PI_CMP_DEVICE is gpu or cpu" >&2; exit 2 ;; esac
measure=0
if [ "$dev" = gpu ]; then
    command -v nvidia-smi >/dev/null || { echo "compare.sh: no nvidia-smi: give PI_CMP_DEVICE=cpu" >&2; exit 1; }
    measure=1
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$log/gpu.txt"
fi
t_start=$(date +%s)

# GPU memory in use now, MiB (0 without a GPU)
vram_now() {
    [ $measure = 1 ] || { echo 0; return; }
    nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -i 0 | head -1 | tr -d ' '
}
# run LOG CMD...: CMD's output to LOG; its peak VRAM over the idle figure (MiB) to LOG.vram
run() {
    out=$1
    shift
    base=$(vram_now)
    "$@" > "$out" 2>&1 &
    pid=$!
    peak=$base
    if [ $measure = 1 ]; then
        while kill -0 $pid 2>/dev/null; do
            v=$(vram_now)
            [ "$v" -gt "$peak" ] 2>/dev/null && peak=$v
            sleep 0.2
        done
    fi
    wait $pid
    rc=$?
    echo $((peak - base)) > "$out.vram"
    return $rc
}
# t/s of pi-bench's row (mode, pp|tg) and of llama-bench's (pp|tg)
pi_ts() { awk -F'|' -v t="$2" '$2 ~ /sparse/ && $3 ~ "^ *"t { gsub(/ /, "", $4); print $4; exit }' "$1"; }
ll_ts() { awk -F'|' -v t="$2" '{ for (i = 2; i < NF; i++) if ($i ~ "^ *"t" ?[0-9]+ *$" && match($(NF-1), /[0-9]+(\.[0-9]+)?/)) { print substr($(NF-1), RSTART, RLENGTH); exit } }' "$1"; }
gib() { awk -v b="$1" 'BEGIN { printf "%.2f", b / 1073741824 }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a != "" && b != "" && b > 0) printf "%.2f", a / b; else print "-" }'; }

# tensor bytes of a GGUF: total, per repeating layer (the mean), the rest; n_layer
sizes() {
    python3 - "$1" <<'EOF'
import re, sys
from gguf import GGUFReader
r = GGUFReader(sys.argv[1])
tot = lay = 0
layers = set()
for t in r.tensors:
    n = int(t.n_bytes)
    tot += n
    m = re.match(r"blk\.(\d+)\.", t.name)
    if m:
        lay += n
        layers.add(int(m.group(1)))
L = max(len(layers), 1)
print(tot, lay // L, tot - lay, L)
EOF
}

table=$log/table.md
[ "$presets" = none ] && presets=
: > "$table"
[ -n "$presets" ] && {
    echo "## Hybrid decode at the same VRAM: ours (PowerInfer file, sparse) vs llama.cpp -ngl (dense twin)"
    echo
    echo "device $dev$( [ -f "$log/gpu.txt" ] && echo ": $(cat "$log/gpu.txt")"), $T threads, -p $P -n $N -r $R; VRAM = peak memory.used over idle, MiB$( [ $measure = 1 ] || echo " (not measured: CPU stand-in)")"
    vf=$(dirname "$llbench")/LLAMACPP_VERSION
    [ -f "$vf" ] && echo "llama.cpp: $(tr '\n' ' ' < "$vf")"
    echo
    echo "| model | budget (share of file) | ours VRAM | ours pp$P | ours tg$N | llama.cpp -ngl | its VRAM | its pp$P | its tg$N | tg ours/it | pp ours/it |"
    echo "|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|"
} > "$table"

fail=0
for pre in $presets; do
    prefix=$mdir/synth-$pre
    if [ ! -f "$prefix.powerinfer.gguf" ] || [ ! -f "$prefix.dense.gguf" ]; then
        echo "compare.sh: generating the $pre pair ..." >&2
        python3 "$here/tools/bench/make_synthetic_powerinfer.py" --preset "$pre" --type q4_0 \
            --unique-layers 2 -o "$prefix" > "$log/gen-$pre.txt" 2>&1 ||
            { echo "compare.sh: generating $pre failed:" >&2; tail -5 "$log/gen-$pre.txt" >&2; fail=1; continue; }
    fi
    sp_total=$(wc -c < "$prefix.powerinfer.gguf") # (gguf's reader refuses PWRI's magic)
    set -- $(sizes "$prefix.dense.gguf")
    dn_layer=$2 dn_rest=$3 n_layer=$4
    cat "$prefix.powerinfer.gguf" "$prefix.dense.gguf" > /dev/null # into the page cache
    # llama.cpp's own VRAM with nothing offloaded (CUDA context, compute buffers)
    run "$log/ll-$pre-ngl0.txt" $llbench -m "$prefix.dense.gguf" -t "$T" -p 0 -n 1 -r 1 -ngl 0 -o md
    ll_base=$(cat "$log/ll-$pre-ngl0.txt.vram")
    for f in $fractions; do
        budget=$(awk -v s="$sp_total" -v f="$f" 'BEGIN { printf "%.0f", s * f }')
        bg=$(awk -v b="$budget" 'BEGIN { printf "%.4f", b / 1073741824 }')
        echo "compare.sh: $pre, budget $bg GiB ($f): ours ..." >&2
        o=$log/ours-$pre-$f.txt
        run "$o" "$pibench" -m "$prefix.powerinfer.gguf" -t "$T" -p "$P" -n "$N" -r "$R" \
            --no-bandwidth --device "$dev" --vram-budget "$bg" || { echo "compare.sh: pi-bench failed ($o)" >&2; fail=1; }
        ours_v=$(cat "$o.vram")
        # the VRAM llama.cpp may use: ours, measured; without a GPU the plan's bytes
        target=$ours_v
        if [ $measure = 0 ]; then
            dv=$(awk -F'|' '$2 ~ /sparse/ && $3 ~ /tg/ { gsub(/ /, "", $12); print $12; exit }' "$o")
            target=$(awk -v g="${dv:-0}" 'BEGIN { printf "%.0f", g * 1024 }')
        fi
        # guess from the layer bytes, then measure and step down while over
        ngl=$(awk -v t="$target" -v b="$ll_base" -v l="$dn_layer" -v L="$n_layer" \
            'BEGIN { n = int((t - b) * 1048576 / l); if (n < 0) n = 0; if (n > L) n = L; print n }')
        ll_v=-
        while :; do
            echo "compare.sh: $pre, budget $bg GiB: llama.cpp -ngl $ngl ..." >&2
            l=$log/ll-$pre-$f.txt
            run "$l" $llbench -m "$prefix.dense.gguf" -t "$T" -p "$P" -n "$N" -r "$R" -ngl "$ngl" -o md ||
                { echo "compare.sh: llama-bench failed ($l)" >&2; fail=1; break; }
            ll_v=$(cat "$l.vram")
            [ $measure = 1 ] && [ "$ll_v" -gt "$target" ] && [ "$ngl" -gt 0 ] || break
            ngl=$((ngl - 1))
        done
        a_tg=$(pi_ts "$o" tg) a_pp=$(pi_ts "$o" pp) b_tg=$(ll_ts "$l" tg) b_pp=$(ll_ts "$l" pp)
        vo=$ours_v vl=$ll_v
        [ $measure = 1 ] || { vo="(plan $target)"; vl="-"; }
        printf '| %s | %s GiB (%s) | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n' "$pre" "$bg" "$f" \
            "$vo" "${a_pp:--}" "${a_tg:--}" "$ngl/$n_layer" "$vl" "${b_pp:--}" "${b_tg:--}" \
            "$(ratio "$a_tg" "$b_tg")" "$(ratio "$a_pp" "$b_pp")" >> "$table"
    done
done
[ -n "${dn_layer:-}" ] && {
    echo
    echo "Dense twin: $(gib "$dn_layer") GiB per layer in the last model; llama.cpp at -ngl 0 used ${ll_base:-?} MiB of VRAM."
} >> "$table"

# ---- mixture of experts: our expert placement against llama.cpp's --n-cpu-moe ----------
# PI_CMP_MOE=qwen3moe: a synthetic file at Qwen3-30B-A3B's layer shape with
# PI_CMP_MOE_LAYERS layers (default 12: 4.4 GB; PI_CMP_MOE_ARGS: more options of
# make_synthetic_arch.py), budgets PI_CMP_FRACTIONS of the file.
# Ours: pi-bench --vram-budget B (the planner puts attention, routers, norms, output and
# KV first, then experts). llama.cpp: every layer on the GPU (-ngl 99) but the experts of
# the first N layers on the CPU (-ncmoe N), the smallest N whose measured VRAM is at most
# ours (guessed from the expert bytes per layer, measured, raised while over).
moe=${PI_CMP_MOE:-}
if [ -n "$moe" ]; then
    ml=${PI_CMP_MOE_LAYERS:-12}
    mf=$mdir/synth-$moe-$ml.gguf
    if [ ! -f "$mf" ]; then
        echo "compare.sh: generating the $moe file ($ml layers) ..." >&2
        python3 "$here/tools/bench/make_synthetic_arch.py" --arch "$moe" --type q4_0 --n-layer "$ml" \
            ${PI_CMP_MOE_ARGS:-} -o "$mf" > "$log/gen-$moe.txt" 2>&1 ||
            { echo "compare.sh: generating $moe failed:" >&2; tail -5 "$log/gen-$moe.txt" >&2; fail=1; mf=; }
    fi
fi
if [ -n "$moe" ] && [ -n "$mf" ]; then
    m_total=$(wc -c < "$mf")
    m_exp=$(python3 - "$mf" <<'EOF2'
import re, sys
from gguf import GGUFReader
r = GGUFReader(sys.argv[1])
e, layers = 0, set()
for t in r.tensors:
    m = re.match(r"blk\.(\d+)\.ffn_(gate|up|down)_exps", t.name)
    if m:
        e += int(t.n_bytes)
        layers.add(int(m.group(1)))
print(e // max(len(layers), 1), len(layers))
EOF2
)
    set -- $m_exp
    exp_layer=$1 m_layers=$2
    cat "$mf" > /dev/null
    run "$log/ll-$moe-all-cpu.txt" $llbench -m "$mf" -t "$T" -p 0 -n 1 -r 1 -ngl 99 --n-cpu-moe "$m_layers" -o md
    ll_attn=$(cat "$log/ll-$moe-all-cpu.txt.vram")
    {
        echo
        echo "## Mixture of experts at the same VRAM: ours (expert placement) vs llama.cpp -ngl 99 --n-cpu-moe N"
        echo
        echo "$moe, $m_layers layers, $(gib "$m_total") GiB file, $(gib "$exp_layer") GiB of experts per layer; llama.cpp with every expert on the CPU used $ll_attn MiB"
        echo
        echo "| budget (share of file) | ours VRAM | ours pp$P | ours tg$N | llama.cpp -ncmoe | its VRAM | its pp$P | its tg$N | tg ours/it | pp ours/it |"
        echo "|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|"
    } >> "$table"
    for f in $fractions; do
        budget=$(awk -v s="$m_total" -v f="$f" 'BEGIN { printf "%.0f", s * f }')
        bg=$(awk -v b="$budget" 'BEGIN { printf "%.4f", b / 1073741824 }')
        echo "compare.sh: $moe, budget $bg GiB ($f): ours ..." >&2
        o=$log/ours-$moe-$f.txt
        run "$o" "$pibench" -m "$mf" -t "$T" -p "$P" -n "$N" -r "$R" --no-bandwidth --device "$dev" \
            --vram-budget "$bg" || { echo "compare.sh: pi-bench failed ($o)" >&2; fail=1; }
        ours_v=$(cat "$o.vram")
        target=$ours_v
        if [ $measure = 0 ]; then
            dv=$(awk -F'|' '$3 ~ /tg/ && NF > 12 { gsub(/ /, "", $12); print $12; exit }' "$o")
            target=$(awk -v g="${dv:-0}" 'BEGIN { printf "%.0f", g * 1024 }')
        fi
        ncm=$(awk -v t="$target" -v b="$ll_attn" -v e="$exp_layer" -v L="$m_layers" \
            'BEGIN { k = int((t - b) * 1048576 / e); if (k < 0) k = 0; if (k > L) k = L; print L - k }')
        ll_v=-
        while :; do
            echo "compare.sh: $moe, budget $bg GiB: llama.cpp -ngl 99 -ncmoe $ncm ..." >&2
            l=$log/ll-$moe-$f.txt
            run "$l" $llbench -m "$mf" -t "$T" -p "$P" -n "$N" -r "$R" -ngl 99 --n-cpu-moe "$ncm" -o md ||
                { echo "compare.sh: llama-bench failed ($l)" >&2; fail=1; break; }
            ll_v=$(cat "$l.vram")
            [ $measure = 1 ] && [ "$ll_v" -gt "$target" ] && [ "$ncm" -lt "$m_layers" ] || break
            ncm=$((ncm + 1))
        done
        a_tg=$(awk -F'|' '$3 ~ /^ *tg/ { gsub(/ /, "", $4); print $4; exit }' "$o")
        a_pp=$(awk -F'|' '$3 ~ /^ *pp/ { gsub(/ /, "", $4); print $4; exit }' "$o")
        b_tg=$(ll_ts "$l" tg) b_pp=$(ll_ts "$l" pp)
        vo=$ours_v vl=$ll_v
        [ $measure = 1 ] || { vo="(plan $target)"; vl="-"; }
        printf '| %s GiB (%s) | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n' "$bg" "$f" "$vo" \
            "${a_pp:--}" "${a_tg:--}" "$ncm/$m_layers" "$vl" "${b_pp:--}" "${b_tg:--}" \
            "$(ratio "$a_tg" "$b_tg")" "$(ratio "$a_pp" "$b_pp")" >> "$table"
    done
fi
echo >> "$table"
echo "$(( $(date +%s) - t_start )) s in all. Logs: $log" >> "$table"
cat "$table"
exit $fail
