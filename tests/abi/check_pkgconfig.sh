#!/bin/sh
# Install into a scratch DESTDIR, then build a C and a C++ program against the
# installed powerinfer.pc with plain `cc $(pkg-config --cflags --libs powerinfer)`
# and run them. Args: BUILD_ROOT WORK_DIR
set -eu
build=$1
work=$2
rm -rf "$work"
mkdir -p "$work"
meson install -C "$build" --destdir "$work/root" --no-rebuild --quiet >/dev/null
pc=$(find "$work/root" -name powerinfer.pc | head -n 1)
[ -n "$pc" ] || { echo "FAIL: powerinfer.pc not installed"; exit 1; }
export PKG_CONFIG_PATH="$(dirname "$pc")"
export PKG_CONFIG_SYSROOT_DIR="$work/root"
libdir=$(dirname "$(find "$work/root" -name 'libpowerinfer.so' | head -n 1)")
cat > "$work/use.c" <<'C'
#include <powerinfer.h>
#include <stdio.h>
int main(void) {
    pi_model_params p;
    if (pi_model_default_params(&p) != PI_OK) return 1;
    if (pi_version() != PI_VERSION_NUMBER || pi_abi_version() != PI_ABI_VERSION) return 2;
    printf("C: libpowerinfer %s\n", pi_version_string());
    return 0;
}
C
cat > "$work/use.cpp" <<'CPP'
#include <powerinfer.h>
#include <cstdio>
int main() {
    pi_model *m = nullptr;
    int st = pi_model_open("/nonexistent.gguf", nullptr, &m);
    if (st != PI_ERR_IO || m != nullptr) return 1;
    std::printf("C++: %s\n", pi_status_str(st));
    return 0;
}
CPP
cc=${CC:-cc}
cxx=${CXX:-c++}
# shellcheck disable=SC2046
$cc ${PI_EXTRA_FLAGS:-} -std=c11 -Wall -Werror "$work/use.c" -o "$work/use_c" $(pkg-config --cflags --libs powerinfer)
LD_LIBRARY_PATH="$libdir" "$work/use_c"
passed=1
if command -v "$cxx" >/dev/null 2>&1; then
    # shellcheck disable=SC2046
    $cxx ${PI_EXTRA_FLAGS:-} -std=c++11 -Wall -Werror "$work/use.cpp" -o "$work/use_cpp" $(pkg-config --cflags --libs powerinfer)
    LD_LIBRARY_PATH="$libdir" "$work/use_cpp"
    passed=2
fi
pkg-config --modversion powerinfer
echo "$passed passed, 0 failed"
