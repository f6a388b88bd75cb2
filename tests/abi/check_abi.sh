#!/bin/sh
# Compare the binary interface of libpowerinfer.so with the committed baseline
# (tests/abi/libpowerinfer.abi) using libabigail (Debian package abigail-tools).
#
#   check_abi.sh [--update] LIB BASELINE HEADERS_DIR
#       Check (or, with --update, rewrite) BASELINE from LIB, a libpowerinfer.so built
#       with debug information (-g). Only types defined in HEADERS_DIR count: the
#       layout of the opaque handles (pi_model, pi_ctx, ...) is not part of the ABI.
#   check_abi.sh [--update] [--build-dir DIR]
#       Configure and build a debug-info copy of the library from this source tree in
#       DIR (default build-abi/ at the top of the tree; reused across runs), then check
#       it against tests/abi/libpowerinfer.abi (or rewrite that file).
#
# The second form builds with gcc (override with PI_ABI_CC) at -O0 -g: the dump does
# not depend on the optimisation level (gcc -O0 -g and -O3 -g give the same file) and
# clang's agrees with gcc's (abidiff finds no difference), but one fixed compiler keeps
# the baseline byte-stable. -O0 builds fastest.
#
# Verdict (abidiff's exit status is a bit set: 1 error, 2 usage, 4 ABI change,
# 8 incompatible change):
#   0            identical: pass.
#   4, with only added functions/variables and nothing removed or changed: pass, with
#                a request to refresh the baseline (--update) in the same commit.
#   anything else (a removed function, a changed signature, a changed public struct,
#                including a field appended per ABI.md): fail. If the change is
#                intended, run `check_abi.sh --update` and commit the new baseline
#                with the change, so the review shows the ABI diff.
# Exit 77 (skip) when abidw/abidiff are missing or LIB has no debug information,
# unless PI_REQUIRE_ABI=1.
set -eu

here=$(cd "$(dirname "$0")" && pwd)
src=$(cd "$here/../.." && pwd)

skip() {
    echo "SKIP: $*"
    [ "${PI_REQUIRE_ABI:-0}" = 1 ] && exit 1
    exit 77
}

update=0
build_dir=
while [ $# -gt 0 ]; do
    case $1 in
    --update) update=1; shift ;;
    --build-dir) build_dir=$2; shift 2 ;;
    -h|--help) sed -n '/^set -eu/q;2,$p' "$0"; exit 0 ;;
    --*) echo "unknown option $1" >&2; exit 2 ;;
    *) break ;;
    esac
done

if ! command -v abidw > /dev/null 2>&1 || ! command -v abidiff > /dev/null 2>&1; then
    skip "abidw/abidiff not found (apt-get install abigail-tools)"
fi

if [ $# -eq 0 ]; then
    build_dir=${build_dir:-$src/build-abi}
    if [ ! -f "$build_dir/build.ninja" ]; then
        log=$(mktemp)
        CC=${PI_ABI_CC:-gcc} meson setup "$build_dir" "$src" -Dbuildtype=debug \
            -Dtools=false -Dtests=false > "$log" 2>&1 || {
            cat "$log"
            rm -f "$log"
            exit 1
        }
        rm -f "$log"
    fi
    meson compile -C "$build_dir" powerinfer > /dev/null
    set -- "$build_dir/lib/libpowerinfer.so" "$here/libpowerinfer.abi" "$src/include"
elif [ $# -ne 3 ]; then
    echo "usage: $0 [--update] LIB BASELINE HEADERS_DIR | $0 [--update] [--build-dir DIR]" >&2
    exit 2
fi
lib=$1
baseline=$2
headers=$3

[ -f "$lib" ] || { echo "FAIL: $lib not found"; exit 1; }
[ "$(getconf LONG_BIT)" = 64 ] || skip "the baseline describes a 64-bit (LP64) library"
if ! LC_ALL=C readelf -S "$lib" 2> /dev/null | grep -q '\.debug_info'; then
    skip "$lib has no debug information (build with -Ddebug=true, or run $0 without arguments)"
fi

# Flags chosen so that the dump depends only on the public interface: no source
# locations, build directories or DT_NEEDED entries; undefined (internal) functions
# and types not defined in the public header dropped; type ids hashed from the
# types, so that an unrelated change does not renumber the whole file.
dump() {
    abidw --headers-dir "$headers" --drop-private-types --drop-undefined-syms \
        --no-show-locs --no-comp-dir-path --no-corpus-path --no-elf-needed \
        --no-architecture --type-id-style hash "$1" |
        # translation units are named by path relative to the build directory:
        # keep the part from the source tree's lib/ or backends/ on
        sed -e "s#path='[^']*/\(lib\|backends\)/#path='\1/#"
}

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
dump "$lib" > "$tmp/current.abi"

if [ "$update" = 1 ]; then
    cp "$tmp/current.abi" "$baseline"
    echo "wrote $baseline ($(grep -c '<elf-symbol ' "$baseline") symbols)"
    exit 0
fi
[ -f "$baseline" ] || { echo "FAIL: no baseline $baseline (run $0 --update)"; exit 1; }

set +e
abidiff --no-default-suppression "$baseline" "$tmp/current.abi" > "$tmp/diff.txt" 2>&1
st=$?
set -e

if [ "$st" = 0 ]; then
    echo "ABI unchanged: $(grep -c '<elf-symbol ' "$baseline") symbols"
    exit 0
fi
cat "$tmp/diff.txt"
if [ $((st & 3)) != 0 ]; then
    echo "FAIL: abidiff could not compare (status $st)"
    exit 1
fi
# Only additions? Every "N Removed" and "N Changed" count in the summaries is 0.
if [ "$st" = 4 ] &&
    ! grep -E '(^|[^0-9])[1-9][0-9]* (Removed|Changed)' "$tmp/diff.txt" > /dev/null; then
    echo "ABI extended compatibly (additions only): refresh the baseline in the same"
    echo "commit with: sh tests/abi/check_abi.sh --update"
    exit 0
fi
echo "FAIL: the ABI changed incompatibly (abidiff status $st: changed or removed"
echo "functions, variables or public types). If this is intended, it needs a new"
echo "function name or a new PI_ABI_VERSION (ABI.md); appending a field to a params"
echo "struct is allowed by ABI.md but still refreshes the baseline on purpose:"
echo "    sh tests/abi/check_abi.sh --update"
exit 1
