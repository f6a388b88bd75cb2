#!/bin/sh
# tests/gpu/run.sh -- every check that needs a GPU, in one go (about 5 minutes on an
# H200): the kernel conformance table (each GPU op and weight type against the CPU
# scalar reference on random shapes), the hybrid equality tests on the GPU (every
# budget gives the CPU-only logits), the architecture fixtures (tests/fixtures/archs)
# as GPU hybrid contexts against CPU only (with pi-sparsify's S = 0 files of five of them:
# thresholded neurons and experts on the device), graph submission against op by op
# (test_graphs --gpu: the same logits bit for bit, no graph failed), and pi-bench at a
# few budgets on a synthetic 1B-shape PowerInfer model, the whole-model budget also
# with --no-graphs (what CUDA graphs gain in decode). A summary table comes last.
#
#   sh tests/gpu/run.sh [BUILD]
#
# BUILD: a meson build directory configured with -Dcuda=enabled (or -Dhip=enabled);
# made as build-gpu when missing. Or a flat directory holding test_gpu_kernels,
# test_hybrid, pi-bench and libpowerinfer.so.* (what tests/gpu/pack.sh writes, for a
# machine without the build tools; test_gpu_archs too, else that check is skipped).
# Environment: PI_GPU_MODEL, a PowerInfer model for pi-bench (default: generated into
# $TMPDIR with tools/bench/make_synthetic_powerinfer.py, which needs numpy and gguf);
# PI_GPU_BUDGETS (GiB list, default 0,0.1,0.25,0.5,auto); PI_GPU_LOG, a directory for
# the logs (default $TMPDIR/pi-gpu).
set -u
here=$(cd "$(dirname "$0")/../.." && pwd)
B=${1:-build-gpu}
log=${PI_GPU_LOG:-${TMPDIR:-/tmp}/pi-gpu}
mkdir -p "$log"

if [ -f "$B/build.ninja" ] || [ ! -e "$B" ]; then
    if [ ! -f "$B/build.ninja" ]; then
        meson setup "$B" "$here" -Dcuda=enabled -Dbuildtype=release || exit 1
    fi
    ninja -C "$B" || exit 1
    kernels=$B/tests/gpu/test_gpu_kernels hybrid=$B/tests/test_hybrid bench=$B/tools/pi-bench
    batch=$B/tests/test_batch archs=$B/tests/gpu/test_gpu_archs graphs=$B/tests/test_graphs
else
    kernels=$B/test_gpu_kernels hybrid=$B/test_hybrid bench=$B/pi-bench batch=$B/test_batch
    archs=$B/test_gpu_archs graphs=$B/test_graphs
    export LD_LIBRARY_PATH="$B${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi

command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,driver_version \
    --format=csv,noheader | tee "$log/gpu.txt"

t0=$(date +%s)
"$kernels" >"$log/kernels.txt" 2>&1
k_rc=$?
tail -n 40 "$log/kernels.txt"
t1=$(date +%s)
"$hybrid" --gpu >"$log/hybrid.txt" 2>&1
h_rc=$?
grep -E '^#|ERROR|FAILED|PASSED' "$log/hybrid.txt"
"$batch" --gpu >"$log/batch.txt" 2>&1
s_rc=$?
grep -E '^#|ERROR|FAILED|PASSED' "$log/batch.txt"
g_rc=77
if [ -x "$graphs" ]; then
    "$graphs" --gpu >"$log/graphs.txt" 2>&1
    g_rc=$?
    grep -E '^#|ERROR|FAILED|PASSED' "$log/graphs.txt"
else
    echo "test_graphs: not in $B, skipped"
fi
# every architecture fixture with the reference that gives its tokens
a_rc=77
if [ -x "$archs" ]; then
    set --
    for m in "$here"/tests/fixtures/archs/*.gguf; do
        r=${m%.gguf}.ref.bin
        [ -f "$r" ] || r=${m%.*.gguf}.ref.bin
        [ -f "$r" ] && set -- "$@" "$m" "$r"
    done
    # pi-sparsify's files at S = 0 (every neuron kept: threshold mode equals dense up
    # to rounding, so no neuron near a threshold can flip between GPU and CPU sums):
    # the device's thresholded activation, transposed down and thresholded experts
    sp=$(dirname "$bench")/pi-sparsify
    if [ -x "$sp" ]; then
        for f in llama-bias gemma2 starcoder2 mixtral qwen2moe; do
            "$sp" -m "$here/tests/fixtures/archs/$f.f16.gguf" -o "$log/$f.s0.gguf" --sparsity 0 \
                --calib "$here/tests/fixtures/perplexity/text.txt" -q >"$log/sparsify-$f.txt" 2>&1 &&
                set -- "$@" "$log/$f.s0.gguf" "$here/tests/fixtures/archs/$f.ref.bin"
        done
    fi
    "$archs" "$@" >"$log/archs.txt" 2>&1
    a_rc=$?
    grep -E '^#|ERROR|FAILED|PASSED|SKIP' "$log/archs.txt"
else
    echo "test_gpu_archs: not in $B, skipped"
fi
t2=$(date +%s)

model=${PI_GPU_MODEL:-}
if [ "${PI_GPU_BUDGETS:-}" = none ]; then
    model=
elif [ -z "$model" ]; then
    model=${TMPDIR:-/tmp}/pi-gpu-synth-1b
    if [ ! -f "$model.powerinfer.gguf" ]; then
        python3 "$here/tools/bench/make_synthetic_powerinfer.py" --preset 1b -o "$model" \
            >"$log/synth.txt" 2>&1 || { tail -n 5 "$log/synth.txt"; model=; }
    fi
    [ -n "$model" ] && model=$model.powerinfer.gguf
fi
b_rc=77
if [ -n "$model" ]; then
    threads=$(nproc 2>/dev/null || echo 4)
    [ "$threads" -gt 8 ] && threads=8
    "$bench" -m "$model" -t "$threads" -p 64 -n 64 -r 3 --no-bandwidth --device gpu \
        --vram-budget "${PI_GPU_BUDGETS:-0,0.1,0.25,0.5,auto}" >"$log/bench.txt" 2>&1
    b_rc=$?
    "$bench" -m "$model" -t "$threads" -p 64 -n 64 -r 3 --no-bandwidth --device gpu \
        --vram-budget auto --no-graphs >"$log/bench-nographs.txt" 2>&1
    "$bench" -m "$model" -t "$threads" -p 64 -n 64 -r 3 --no-bandwidth \
        >"$log/bench-cpu.txt" 2>&1
fi
t3=$(date +%s)

word() { case $1 in 0) echo pass ;; 77) echo skip ;; *) echo "FAIL ($1)" ;; esac; }
echo
echo "== pi-bench, CPU only =="
[ -f "$log/bench-cpu.txt" ] && cat "$log/bench-cpu.txt"
echo "== pi-bench, hybrid =="
[ -f "$log/bench.txt" ] && cat "$log/bench.txt"
echo "== pi-bench, whole budget, --no-graphs (op by op) =="
[ -f "$log/bench-nographs.txt" ] && cat "$log/bench-nographs.txt"
echo
echo "| check | result | seconds |"
echo "|---|---|--:|"
echo "| kernel conformance (test_gpu_kernels) | $(word $k_rc) | $((t1 - t0)) |"
echo "| hybrid = CPU-only logits (test_hybrid --gpu), batches and states with the KV cache on the GPU (test_batch --gpu), architecture fixtures on the GPU = CPU only (test_gpu_archs) | $(word $h_rc), $(word $s_rc), $(word $a_rc) | $((t2 - t1)) |"
echo "| graphs = op by op, bit for bit (test_graphs --gpu) | $(word $g_rc) | |"
echo "| pi-bench at budgets | $(word $b_rc) | $((t3 - t2)) |"
[ $k_rc -eq 0 ] && [ $h_rc -eq 0 ] && [ $s_rc -eq 0 ] && { [ $g_rc -eq 0 ] || [ ! -x "$graphs" ]; } &&
    { [ $a_rc -eq 0 ] || [ ! -x "$archs" ]; } && { [ $b_rc -eq 0 ] || [ "${PI_GPU_BUDGETS:-}" = none ]; }
