#!/bin/sh
# Build the programs in tools/examples/ the way a user would, against an installed
# libpowerinfer (`meson install --destdir` + plain `cc ... $(pkg-config --cflags --libs
# powerinfer)`), with -Wall -Wextra -Werror, and run each on a real model.
#
# Args: BUILD_DIR WORK_DIR MODEL [SRC_ROOT]
#   BUILD_DIR  a configured and built meson build directory
#   WORK_DIR   scratch directory (emptied)
#   MODEL      a GGUF model with a tokenizer (SmolLM2: python3 tools/smollm2_path.py)
#   SRC_ROOT   source tree (default: two levels above this script)
# Env: CC, CXX (compilers), PI_EXTRA_FLAGS (e.g. -fsanitize=... for sanitizer builds).
# Exit 77 (skip) when MODEL does not exist, unless PI_REQUIRE_SMOLLM2=1.
set -eu
[ $# -ge 3 ] || { echo "usage: $0 BUILD_DIR WORK_DIR MODEL [SRC_ROOT]" >&2; exit 2; }
build=$1
work=$2
model=$3
src=${4:-$(cd "$(dirname "$0")/../.." && pwd)}
ex="$src/tools/examples"

if [ ! -f "$model" ]; then
    echo "model $model not found"
    [ "${PI_REQUIRE_SMOLLM2:-0}" = 1 ] && exit 1
    exit 77
fi

rm -rf "$work"
mkdir -p "$work"
meson install -C "$build" --destdir "$work/root" --no-rebuild --quiet >/dev/null
pc=$(find "$work/root" -name powerinfer.pc | head -n 1)
[ -n "$pc" ] || { echo "FAIL: powerinfer.pc not installed"; exit 1; }
PKG_CONFIG_PATH=$(dirname "$pc")
export PKG_CONFIG_PATH
export PKG_CONFIG_SYSROOT_DIR="$work/root"
libdir=$(dirname "$(find "$work/root" -name 'libpowerinfer.so' | head -n 1)")
flags=$(pkg-config --cflags --libs powerinfer)
cc=${CC:-cc}
cxx=${CXX:-c++}
extra=${PI_EXTRA_FLAGS:-}

passed=0
failed=0
fail() {
    echo "FAIL: $*"
    failed=$((failed + 1))
}

# build NAME COMPILER STD SOURCE [LIBS]
build() {
    # shellcheck disable=SC2086
    if $2 $extra -std=$3 -Wall -Wextra -Werror -o "$work/$1" "$4" $flags ${5:-} \
        2> "$work/$1.build.log"; then
        return 0
    fi
    cat "$work/$1.build.log"
    fail "$1 does not compile"
    return 1
}

# run NAME MIN_LINES ARGS...: exit status 0, non-empty output, at least MIN_LINES lines
run() {
    name=$1
    min=$2
    shift 2
    if ! LD_LIBRARY_PATH="$libdir" timeout 120 "$work/$name" "$@" \
        > "$work/$name.out" 2> "$work/$name.err"; then
        cat "$work/$name.err"
        fail "$name exited with an error"
        return 1
    fi
    if [ ! -s "$work/$name.out" ] || [ "$(wc -l < "$work/$name.out")" -lt "$min" ]; then
        cat "$work/$name.out" "$work/$name.err"
        fail "$name printed too little"
        return 1
    fi
    echo "--- $name"
    cat "$work/$name.out"
    passed=$((passed + 1))
}

# Output must be more than the echoed prompt: check that text was generated.
generated() {
    name=$1
    prompt=$2
    out=$(cat "$work/$name.out")
    if [ "$out" = "$prompt" ]; then
        fail "$name generated no text"
        passed=$((passed - 1))
    fi
}

p="The capital of France is"
if build simple "$cc" c11 "$ex/simple.c"; then
    run simple 1 "$model" "$p" 8 && generated simple "$p"
fi
if build stream_callback "$cc" c11 "$ex/stream_callback.c"; then
    run stream_callback 1 "$model" "Once upon a time" 8
fi
if build two_threads "$cc" c11 "$ex/two_threads.c" -lpthread; then
    if run two_threads 2 "$model" "The sky is" "My favourite food is" 8 &&
        { [ "$(grep -c '^\[thread 1\] The sky is.' "$work/two_threads.out")" != 1 ] ||
          [ "$(grep -c '^\[thread 2\] My favourite food is.' "$work/two_threads.out")" != 1 ]; }; then
        fail "two_threads did not print two continuations"
        passed=$((passed - 1))
    fi
fi
if command -v "$cxx" > /dev/null 2>&1; then
    if build simple_cpp "$cxx" c++11 "$ex/simple.cpp"; then
        run simple_cpp 1 "$model" "$p" 8 && generated simple_cpp "$p"
    fi
else
    echo "no C++ compiler ($cxx): simple.cpp skipped"
fi

echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
