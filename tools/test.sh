#!/bin/sh
# The whole test suite, as CI runs it:
#   1. install dependencies (tools/setup.sh);
#   2. release build with gcc, `meson test` (every suite);
#   3. the CUDA and HIP builds (compiled; GPU tests skip without a GPU), the ARM64 cross
#      build with its tests under qemu-user (tools/cross/test_arm64.sh), the Windows
#      cross build with its tests under wine (tools/cross/test_windows.sh), the ABI check,
#      ThreadSanitizer runs, then a clang build with AddressSanitizer +
#      UndefinedBehaviorSanitizer and the libFuzzer harnesses, `meson test` again, then
#      each fuzzer for a bounded time (PI_FUZZ_SECONDS, default 60; the plan fuzzer
#      PI_FUZZ_PLAN_SECONDS, default 45) over the committed corpus and generated models.
# Pass --quick to do only steps 1 and 2.
# A skip is a failure unless tests/skip-allowed.txt lists it (tools/check_skips.py reads
# each build's meson-logs/testlog.json after its `meson test`), and the suites that need
# optional packages (the Python format tests, pi-server, the browser and openai tests)
# fail instead of skipping when those are missing (PI_REQUIRE_ALL=1).
set -eu
cd "$(dirname "$0")/.."
# each step's start, in seconds since the script began (CI's limit is on the whole)
T0=$(date +%s)
step() { echo "== tools/test.sh at $(($(date +%s) - T0)) s: $1"; }
step "setup"
sh tools/setup.sh
export PI_REQUIRE_SMOLLM2=1
export PI_REQUIRE_ALL=1
# The SIMD kernel tables this CPU supports must all run in tests/kernels (from
# /proc/cpuinfo, independently of the library's own cpuid detection).
simd=
cpu_has() { grep -qw "$1" /proc/cpuinfo; }
if cpu_has avx2 && cpu_has fma && cpu_has f16c; then
    simd=avx2
    if cpu_has avx512f && cpu_has avx512dq && cpu_has avx512bw && cpu_has avx512vl &&
        cpu_has avx512_vnni; then
        simd=avx2,avx512
    fi
fi
export PI_REQUIRE_SIMD="$simd"

# The tests whose absence would go unnoticed: a missing dependency keeps them from being
# registered at all (pi-server: -Dserver=enabled makes that a configure error instead).
required="--require server --require python --require real-model --require pi-quantize
    --require gguf-package-roundtrip --require pt-reader --require activation-stats
    --require gpuidx-format --require powerinfer-convert --require kernels --require forward
    --require check-skips"

# --reconfigure also reads options added since the directory was set up
step "release build and tests"
if [ -d build ]; then
    meson setup --reconfigure build -Dserver=enabled
else
    meson setup build -Dserver=enabled
fi
meson compile -C build
meson test -C build --print-errorlogs
# shellcheck disable=SC2086
python3 tools/check_skips.py build $required

# The Python package installs from the repository (pip, into a throw-away venv) and its
# tests pass against the installed copy too (the meson suite 'python' ran them from the
# source tree).
step "the installed Python package"
rm -rf build/pyvenv
python3 -m venv --system-site-packages build/pyvenv
build/pyvenv/bin/python -m pip install -q --disable-pip-version-check ./tools/python
PI_PYTHON_INSTALLED=1 PI_LIBRARY="$PWD/build/lib/libpowerinfer.so" \
    build/pyvenv/bin/python -m pytest -q -rs -p no:cacheprovider tests/python \
    > build/pytest-installed.log 2>&1 || { cat build/pytest-installed.log; exit 1; }
cat build/pytest-installed.log
python3 tools/check_skips.py --pytest-log build/pytest-installed.log --name python-installed

# Rust bindings (tools/rust: std only, no registry needed) against the library just built
(cd tools/rust && PI_LIB_DIR="$OLDPWD/build/lib" CARGO_TARGET_DIR="$OLDPWD/build/rust-target" \
    PI_TEST_MODEL="$(python3 ../smollm2_path.py)" cargo test --offline)

[ "${1:-}" = "--quick" ] && exit 0

# The GPU backends compile: CUDA with the toolkit's nvcc (sm_80/86/89/90 + PTX) and HIP
# with Debian's hipcc (gfx90a, gfx1030). With no GPU here their kernel test skips (77)
# and everything else, hybrid runs with a CPU device included, must pass as in build/.
# tests/gpu/run.sh is the check on a real GPU.
PATH="$PATH:/usr/local/cuda/bin"
step "CUDA build and tests"
[ -d build-cuda ] || meson setup build-cuda -Dcuda=enabled
meson compile -C build-cuda
meson test -C build-cuda --print-errorlogs --no-suite python --no-suite server
python3 tools/check_skips.py build-cuda --require gpu-kernels
step "HIP build and tests"
[ -d build-hip ] || meson setup build-hip -Dhip=enabled
meson compile -C build-hip
meson test -C build-hip --print-errorlogs --no-suite python --no-suite server
python3 tools/check_skips.py build-hip --require gpu-kernels

# The cross builds (tools/cross/, docs/platforms.md): ARM64 with Debian's aarch64 gcc,
# every test but the `python` suite and pi-perplexity under qemu-user, the NEON and
# dot-product kernel tables both required, and pi-run's greedy text on SmolLM2 equal to
# build/'s up to a near-tie of the two best logits (tools/cross/greedy_agree.py).
step "ARM64"
t0=$(date +%s)
sh tools/cross/test_arm64.sh
echo "ARM64 cross build and tests: $(($(date +%s) - t0)) s"
# Windows x86-64 with mingw-w64: PCRE2, cJSON and cmocka from Debian's sources, the
# DLL's exports and imports, every suite but `python` and `server` under wine,
# pi-run.exe's greedy text equal to build/'s, also from a directory with a non-ASCII
# name.
step "Windows"
t0=$(date +%s)
PI_NATIVE_PIRUN="$PWD/build/tools/pi-run" sh tools/cross/test_windows.sh
echo "Windows cross build and tests: $(($(date +%s) - t0)) s"

# The binary interface against the committed libabigail dump (a gcc -O0 -g library in
# build-abi/), and N contexts on one model in N threads under ThreadSanitizer.
step "ABI"
PI_REQUIRE_ABI=1 sh tests/abi/check_abi.sh
step "ThreadSanitizer"
sh tests/tsan/run.sh . build-tsan
step "ASan+UBSan build and tests"

[ -d build-asan ] || CC=clang CXX=clang++ meson setup build-asan -Dbuildtype=debugoptimized \
    -Db_sanitize=address,undefined -Db_lundef=false -Dfuzz=true
meson compile -C build-asan
UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 meson test -C build-asan --print-errorlogs
python3 tools/check_skips.py build-asan --require server-sanitized --require abi-dump \
    --require kernels

step "fuzzers"
secs=${PI_FUZZ_SECONDS:-60}
# A fuzzer passes when it exits 0 having executed at least one input (libFuzzer's
# final stats); anything else stops the script.
fuzz_passed=0
fuzz_names=
fuzz_result() { # NAME LOG
    grep -E "stat::number_of_executed_units|Done" "$2" | tail -n 2
    units=$(sed -n 's/^stat::number_of_executed_units: *\([0-9][0-9]*\).*/\1/p' "$2" | tail -n 1)
    if [ -z "$units" ] || [ "$units" -eq 0 ]; then
        echo "$1 executed no inputs (log: $2)"
        exit 1
    fi
    fuzz_passed=$((fuzz_passed + 1))
    fuzz_names="$fuzz_names${fuzz_names:+, }$1 ($units inputs)"
}
# A UBSan report stops a fuzzer, so that it counts as a failure.
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
work=build-asan/fuzz-work
rm -rf "$work"
mkdir -p "$work/seeds" "$work/gguf" "$work/model"
for spec in "llama dense q8_0" "llama sparse f16" "bamboo sparse q4_0" "llama dense f32"; do
    # shellcheck disable=SC2086
    set -- $spec
    build/tests/write_test_model "$work/seeds/$1_$2_$3.gguf" "$1" "$2" "$3"
done
# a small PowerInfer model with a tokenizer, and an activation-statistics side file
python3 tools/bench/make_synthetic_powerinfer.py --preset tiny -o "$work/syn" > /dev/null
build/tools/pi-run -m "$work/syn.powerinfer.gguf" -p "a b c" -n 2 --profile "$work/seeds/stats.gguf" \
    > /dev/null 2>&1
mkdir -p "$work/state" "$work/state-seeds"
PI_FUZZ_STATE_SEEDS="$work/state-seeds" build-asan/tests/fuzz_state -runs=0 "$work/state-seeds" \
    > /dev/null 2>&1
for f in gguf model state; do
    echo "fuzz_$f: ${secs}s"
    build-asan/tests/fuzz_$f -max_total_time="$secs" -max_len=262144 -print_final_stats=1 \
        "$work/$f" "$work/seeds" "$work/state-seeds" tests/corpus/valid tests/corpus/malformed \
        tests/corpus/unsupported tests/corpus/refused > "$work/fuzz_$f.log" 2>&1 || {
        tail -n 40 "$work/fuzz_$f.log"
        echo "fuzz_$f found a failure (reproducer in $work)"
        exit 1
    }
    fuzz_result "fuzz_$f" "$work/fuzz_$f.log"
done
# GPU index files and activation statistics (the planner's inputs): fuzz_plan writes valid
# ones for its two test models, and takes tests/fixtures/gpuidx behind a selector byte.
# A shorter share (PI_FUZZ_PLAN_SECONDS, default 45, at most PI_FUZZ_SECONDS).
plan_secs=${PI_FUZZ_PLAN_SECONDS:-$((secs < 45 ? secs : 45))}
mkdir -p "$work/plan" "$work/plan-seeds"
PI_FUZZ_PLAN_SEEDS="$work/plan-seeds" build-asan/tests/fuzz_plan -runs=0 "$work/plan-seeds" \
    > /dev/null 2>&1
echo "fuzz_plan: ${plan_secs}s"
build-asan/tests/fuzz_plan \
    -max_total_time="$plan_secs" -max_len=16384 -print_final_stats=1 "$work/plan" \
    "$work/plan-seeds" > "$work/fuzz_plan.log" 2>&1 || {
    tail -n 40 "$work/fuzz_plan.log"
    echo "fuzz_plan found a failure (reproducer in $work)"
    exit 1
}
fuzz_result fuzz_plan "$work/fuzz_plan.log"
# The tokenizers over arbitrary bytes, with the real byte-level BPE vocabulary (SmolLM2)
# and the SentencePiece test vocabulary loaded.
mkdir -p "$work/tokenize"
python3 -c "import json,sys,os
d=json.load(open('tests/fixtures/tokenizer/smollm2.json'))
items=d.get('cases') or d.get('strings') or d.get('corpus') or []
for i,c in enumerate(items):
    t=c['text'] if isinstance(c,dict) else c
    open(os.path.join(sys.argv[1],'s%03d'%i),'w',encoding='utf-8',errors='surrogatepass').write(t)
" "$work/tokenize" || true
echo "fuzz_tokenize: ${secs}s"
# without its model every input would be skipped
smollm2=$(python3 tools/smollm2_path.py)
[ -f "$smollm2" ] || { echo "fuzz_tokenize: SmolLM2 not found ($smollm2)"; exit 1; }
PI_FUZZ_MODEL="$smollm2" PI_FUZZ_SPM_MODEL=tests/fixtures/tokenizer/spm_tiny.gguf \
    build-asan/tests/fuzz_tokenize -max_total_time="$secs" -max_len=4096 -timeout=10 \
    -print_final_stats=1 "$work/tokenize" > "$work/fuzz_tokenize.log" 2>&1 || {
    tail -n 40 "$work/fuzz_tokenize.log"
    echo "fuzz_tokenize found a failure (reproducer in $work)"
    exit 1
}
fuzz_result fuzz_tokenize "$work/fuzz_tokenize.log"
# Grammars (GBNF text, a NUL, then text to feed): seeds from a few grammars and texts,
# the real vocabulary loaded so that the mask is checked against accept too.
mkdir -p "$work/grammar" "$work/grammar-seeds"
python3 -c "import os,sys
seeds=[('root ::= \"a\" [b-d]* (\"x\" | \"yz\"){1,3}', 'abcdxyz'),
 ('root ::= expr\nexpr ::= term ((\"+\"|\"-\") term)*\nterm ::= [0-9]+ | \"(\" expr \")\"', '(1+2)-3'),
 ('root ::= \"{\" ws (str ws \":\" ws str ws)? \"}\"\nstr ::= \"\\\"\" [^\"\\\\]* \"\\\"\"\nws ::= [ \\n]{0,4}', '{ \"k\": \"v\" }'),
 ('root ::= [\u00e9-\u00fc\u4e00-\u9fff]{1,4} .', 'caf\u00e9\u4e2d!'),
 ('root ::= x\nx ::= x \"a\"', 'a')]
for i,(g,t) in enumerate(seeds):
    open(os.path.join(sys.argv[1],'g%d'%i),'wb').write(g.encode()+b'\0'+t.encode())
" "$work/grammar-seeds"
echo "fuzz_grammar: ${secs}s"
PI_FUZZ_MODEL="$smollm2" build-asan/tests/fuzz_grammar -max_total_time="$secs" -max_len=4096 \
    -timeout=10 -print_final_stats=1 "$work/grammar" "$work/grammar-seeds" \
    > "$work/fuzz_grammar.log" 2>&1 || {
    tail -n 40 "$work/fuzz_grammar.log"
    echo "fuzz_grammar found a failure (reproducer in $work)"
    exit 1
}
fuzz_result fuzz_grammar "$work/fuzz_grammar.log"
# Chat templates: the real ones each with a conversation behind a NUL byte, and the
# language snippets (tests/fuzz/template_seeds.py).
mkdir -p "$work/template"
python3 tests/fuzz/template_seeds.py "$work/template-seeds" > /dev/null
echo "fuzz_template: ${secs}s"
build-asan/tests/fuzz_template -max_total_time="$secs" -max_len=65536 -timeout=10 \
    -print_final_stats=1 "$work/template" "$work/template-seeds" \
    > "$work/fuzz_template.log" 2>&1 || {
    tail -n 40 "$work/fuzz_template.log"
    echo "fuzz_template found a failure (reproducer in $work)"
    exit 1
}
fuzz_result fuzz_template "$work/fuzz_template.log"
[ "$fuzz_passed" -eq 7 ] || { echo "fuzzers: only $fuzz_passed of 7 ran"; exit 1; }
echo "fuzzers: $fuzz_passed passed: $fuzz_names"
step "done"
