#!/bin/sh
# The ARM64 build and its test suite, on an x86-64 Linux machine (tools/test.sh runs it):
# Debian's aarch64 cross compiler (cross/aarch64-linux-gnu.ini), every program run under
# qemu-user. Needs the packages of tools/setup.sh and root (or sudo) once, to register
# qemu with the kernel's binfmt_misc: the shell and Python tests start the tools by
# name, which only works when the kernel hands aarch64 ELF files to qemu by itself.
#
#   1. meson test under qemu's default CPU (all ARMv8 extensions qemu knows: the NEON
#      and the dot-product kernel tables both run, PI_REQUIRE_SIMD=neon,dotprod), every
#      suite but `python` (it loads the library into this machine's x86-64 Python
#      through ctypes) and three tool tests too slow under qemu (see below);
#   2. the kernel suite again as a Cortex-A53 (ARMv8.0: no SDOT), where only the NEON
#      table may run and must;
#   3. pi-run on SmolLM2 (a real Q4_1 model), greedy: the same text as build/'s x86-64
#      pi-run when that exists, or one that parts from it only where the x86-64 logits
#      of the two tokens are within 0.1 (tools/cross/greedy_agree.py).
# The build directory is build-arm64 (PI_ARM64_BUILD to change it).
set -eu
cd "$(dirname "$0")/../.."
B=${PI_ARM64_BUILD:-build-arm64}
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"

bf=/proc/sys/fs/binfmt_misc
if [ ! -e "$bf/qemu-aarch64" ]; then
    [ -e "$bf/register" ] || $SUDO mount -t binfmt_misc binfmt_misc "$bf"
    # Debian's qemu-user-binfmt rule: aarch64 ELF executables go to qemu-aarch64.
    $SUDO sh -c "cat /usr/lib/binfmt.d/qemu-aarch64.conf > $bf/register"
fi
grep -qx enabled "$bf/qemu-aarch64" || { echo "binfmt_misc: qemu-aarch64 is not enabled" >&2; exit 1; }

if [ -d "$B" ]; then
    meson setup --reconfigure "$B" --cross-file cross/aarch64-linux-gnu.ini -Dserver=disabled
else
    meson setup "$B" --cross-file cross/aarch64-linux-gnu.ini -Dserver=disabled
fi
meson compile -C "$B"

# qemu runs the code 5-50 times slower than the host would: the per-test limits grow.
# Left out besides `python`: pi-perplexity, whose 27 checks score the real model over
# thousands of tokens (17 s here natively, over 15 minutes under qemu), and the pi-run
# and pi-batched tool tests (their option handling, 465 and 300 s under qemu on a 2-core
# Zen 3, about 20 s natively): none has anything architecture-specific, the library
# code under them runs in the other tests (smollm2: the real model's logits and greedy
# text against transformers), and pi-run itself runs on SmolLM2 in step 3.
tests=$(meson test -C "$B" --list --no-suite python 2>/dev/null |
    sed -n 's|^powerinfer:[^ ]* / ||p' | grep -vx -e pi-perplexity -e pi-run -e pi-batched)
# shellcheck disable=SC2086
# (smollm2 decodes its first reference prompt only there: 2 x 64 tokens of the real
# model per prompt took 634 s for the three under qemu)
PI_SMOLLM2_PROMPTS=1 PI_REQUIRE_SIMD=neon,dotprod meson test -C "$B" --print-errorlogs \
    --timeout-multiplier 4 $tests
python3 tools/check_skips.py "$B" --require kernels --require forward --require real-model \
    --require pi-quantize --require check-skips
QEMU_CPU=cortex-a53 PI_REQUIRE_SIMD=neon meson test -C "$B" --print-errorlogs \
    --suite kernels --timeout-multiplier 4
python3 tools/check_skips.py "$B" --require kernels

# Greedy text from a real model, compared with the host build's.
model=$(python3 tools/smollm2_path.py)
run_greedy() {
    "$1" -m "$model" -p "The capital of France is" -n 24 --temp 0 -t 2 2>/dev/null
}
arm=$(run_greedy "$B/tools/pi-run")
[ -n "$arm" ] || { echo "ARM64 pi-run produced no text" >&2; exit 1; }
echo "ARM64 pi-run: $arm"
if [ -x build/tools/pi-run ]; then
    x86=$(run_greedy build/tools/pi-run)
    if [ "$arm" = "$x86" ]; then
        echo "the x86-64 build's greedy text is the same"
    else
        # The kernels round 8-bit activations differently (NEON dot-product blocks,
        # AVX-512 VNNI groups): the texts may part where the two best logits are within
        # that noise, and only there (tools/cross/greedy_agree.py, the x86-64 library).
        echo "the x86-64 build's greedy text differs: $x86"
        PI_LIBRARY="$PWD/build/lib/libpowerinfer.so" python3 tools/cross/greedy_agree.py \
            "$model" "The capital of France is" 24 "$x86" "$arm" || {
            echo "ARM64 and x86-64 greedy texts differ beyond a near-tie" >&2
            exit 1
        }
    fi
fi
