#!/bin/sh
# Build libpowerinfer with ThreadSanitizer in a separate build directory and run
# tests/tsan/test_threads.c on the committed models: many contexts on one shared model,
# each with 1 or 2 worker threads, decoding while other threads query the model.
# Fails on a wrong result or on any ThreadSanitizer report.
#
#   run.sh SRC_ROOT WORK_DIR [MODEL...]
#
# WORK_DIR/build is configured once and reused (only the library is built). Default
# models: a dense Q8_0 model, a PowerInfer (sparse, Q4_0) model, and the SentencePiece
# tokenizer fixture (tokenizer calls from many threads). Env: CC (default gcc; clang
# works too), PI_TSAN_OPTIONS (added to TSAN_OPTIONS), PI_TSAN_REPEAT (runs of the
# test, default 8).
# Exit 77 (skip) when the compiler cannot build a ThreadSanitizer program.
set -eu
[ $# -ge 2 ] || { echo "usage: $0 SRC_ROOT WORK_DIR [MODEL...]" >&2; exit 2; }
src=$(cd "$1" && pwd)
work=$2
shift 2
[ $# -gt 0 ] || set -- "$src/tests/fixtures/models/tiny-silu-gqa.q8_0.gguf" \
    "$src/tests/fixtures/sparse/relu-llama.q4_0.gguf" \
    "$src/tests/fixtures/tokenizer/spm_tiny.gguf"
cc=${CC:-gcc}
mkdir -p "$work"
work=$(cd "$work" && pwd)
build="$work/build"

# Can this toolchain run TSan at all (runtime installed, kernel mappings it accepts)?
printf 'int main(void) { return 0; }\n' > "$work/probe.c"
if ! "$cc" -fsanitize=thread "$work/probe.c" -o "$work/probe" > /dev/null 2>&1 ||
    ! "$work/probe" > /dev/null 2>&1; then
    echo "SKIP: $cc cannot build or run a ThreadSanitizer program"
    exit 77
fi

if [ ! -f "$build/build.ninja" ]; then
    CC=$cc meson setup "$build" "$src" -Dbuildtype=debugoptimized -Db_sanitize=thread \
        -Dtools=false -Dtests=false > "$work/setup.log" 2>&1 || {
        cat "$work/setup.log"
        exit 1
    }
fi
meson compile -C "$build" powerinfer > "$work/compile.log" 2>&1 || {
    cat "$work/compile.log"
    exit 1
}
"$cc" -std=c11 -O1 -g -fsanitize=thread -Wall -Wextra -Werror -I"$src/include" \
    "$src/tests/tsan/test_threads.c" -o "$work/test_threads" \
    -L"$build/lib" -lpowerinfer -Wl,-rpath,"$build/lib" -lpthread

# A race shows only when two threads actually collide, so run the test several times
# (about a second each); the first report stops it.
log="$work/test_threads.log"
repeat=${PI_TSAN_REPEAT:-8}
i=0
while [ "$i" -lt "$repeat" ]; do
    i=$((i + 1))
    st=0
    TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 ${PI_TSAN_OPTIONS:-}" \
        "$work/test_threads" "$@" > "$log" 2>&1 || st=$?
    if grep -q "ThreadSanitizer" "$log"; then
        cat "$log"
        echo "FAIL: ThreadSanitizer reported a problem in run $i of $repeat (log: $log)"
        exit 1
    fi
    if [ "$st" != 0 ]; then
        cat "$log"
        echo "FAIL: test_threads exited with status $st in run $i of $repeat"
        exit 1
    fi
done
cat "$log"
echo "tsan: no reports in $repeat runs"
