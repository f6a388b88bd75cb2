#!/bin/sh
# tools/cross/deps_windows.sh [PREFIX] -- build the Windows (mingw-w64, x86_64) static
# libraries the cross build needs and Debian does not package: PCRE2 (the library),
# cJSON (the tools' --json-schema) and cmocka (the tests), from Debian's own source packages, into PREFIX (default
# build-win-deps, relative to the repository root), with pkg-config files in
# PREFIX/lib/pkgconfig for cross/x86_64-w64-mingw32.ini. Idempotent: a library already
# in PREFIX is not rebuilt. Needs root once, for the deb-src entry and apt-get update.
set -eu
root=$(cd "$(dirname "$0")/../.." && pwd)
prefix=${1:-$root/build-win-deps}
case $prefix in /*) ;; *) prefix=$root/$prefix ;; esac
cc=x86_64-w64-mingw32-gcc-posix
ar=x86_64-w64-mingw32-ar
src=$prefix/src
mkdir -p "$src" "$prefix/lib/pkgconfig" "$prefix/include"

need_sources() {
    if ! apt-cache showsrc pcre2 2>/dev/null | grep -q '^Package: pcre2'; then
        if [ ! -f /etc/apt/sources.list.d/src.sources ]; then
            # the same archives as debian.sources, for source packages
            sed 's/^Types: deb$/Types: deb-src/' /etc/apt/sources.list.d/debian.sources \
                > /etc/apt/sources.list.d/src.sources
        fi
        apt-get update -qq
    fi
}

fetch() { # package [directory prefix, default the package] -> unpacked directory on stdout
    pkg=$1
    dir=${2:-$1}
    d=$(ls -d "$src/$dir"-*/ 2>/dev/null | head -n 1 || true)
    if [ -z "$d" ]; then
        need_sources
        # the newest version first; an older one when a mirror lacks it (the security
        # archive's files are sometimes missing)
        ok=
        for v in $(apt-cache showsrc "$pkg" | sed -n 's/^Version: //p' | sort -rV); do
            if (cd "$src" && apt-get source -qq --download-only "$pkg=$v" >/dev/null 2>&1); then
                ok=1; break
            fi
        done
        [ -n "$ok" ] || { echo "cannot download the source of $pkg" >&2; exit 1; }
        orig=$(ls "$src/${pkg}_"*.orig.tar.* | head -n 1)
        (cd "$src" && tar xf "$orig")
        d=$(ls -d "$src/$dir"-*/ | head -n 1)
    fi
    echo "${d%/}"
}

cmake_build() { # source dir, build dir, extra args...
    s=$1; b=$2; shift 2
    cmake -S "$s" -B "$b" -G "Unix Makefiles" \
        -DCMAKE_SYSTEM_NAME=Windows -DCMAKE_SYSTEM_PROCESSOR=x86_64 \
        -DCMAKE_C_COMPILER=$cc -DCMAKE_RC_COMPILER=x86_64-w64-mingw32-windres \
        -DCMAKE_AR=$(command -v $ar) \
        -DCMAKE_FIND_ROOT_PATH=/usr/x86_64-w64-mingw32 \
        -DCMAKE_BUILD_TYPE=Release -DCMAKE_INSTALL_PREFIX="$prefix" \
        -DCMAKE_INSTALL_LIBDIR=lib -DBUILD_SHARED_LIBS=OFF "$@" >"$b.log" 2>&1 \
        || { tail -n 30 "$b.log"; exit 1; }
    cmake --build "$b" -j2 >>"$b.log" 2>&1 || { tail -n 30 "$b.log"; exit 1; }
    cmake --install "$b" >>"$b.log" 2>&1 || { tail -n 30 "$b.log"; exit 1; }
}

if [ ! -f "$prefix/lib/libpcre2-8.a" ]; then
    s=$(fetch pcre2)
    cmake_build "$s" "$src/build-pcre2" -DPCRE2_BUILD_PCRE2_8=ON -DPCRE2_BUILD_PCRE2_16=OFF \
        -DPCRE2_BUILD_PCRE2_32=OFF -DPCRE2_SUPPORT_JIT=OFF -DPCRE2_BUILD_PCRE2GREP=OFF \
        -DPCRE2_BUILD_TESTS=OFF -DPCRE2_SUPPORT_UNICODE=ON
fi
# Written over whatever the build installed: static, so PCRE2_STATIC for the headers.
cat > "$prefix/lib/pkgconfig/libpcre2-8.pc" <<PC
prefix=$prefix
libdir=\${prefix}/lib
includedir=\${prefix}/include

Name: libpcre2-8
Description: PCRE2 8-bit, static, for x86_64-w64-mingw32
Version: $(sed -n 's/^#define PCRE2_MAJOR *\([0-9]*\).*/\1/p' "$prefix/include/pcre2.h").$(sed -n 's/^#define PCRE2_MINOR *\([0-9]*\).*/\1/p' "$prefix/include/pcre2.h")
Libs: -L\${libdir} -lpcre2-8
Cflags: -I\${includedir} -DPCRE2_STATIC
PC

if [ ! -f "$prefix/lib/libcmocka.a" ]; then
    s=$(fetch cmocka)
    # C99 printf as in the project's MinGW build (%zu in the tests' messages)
    cmake_build "$s" "$src/build-cmocka" -DWITH_STATIC_LIB=ON -DWITH_EXAMPLES=OFF \
        -DCMAKE_C_FLAGS=-D__USE_MINGW_ANSI_STDIO=1 \
        -DUNIT_TESTING=OFF -DPICKY_DEVELOPER=OFF
    # cmocka 1.1 builds a DLL too and names its static library libcmocka-static.a:
    # keep the static one only, as libcmocka.a (-lcmocka would take the import library)
    cp "$prefix/lib/libcmocka-static.a" "$prefix/lib/libcmocka.a"
    rm -f "$prefix/lib/libcmocka.dll.a" "$prefix/bin/cmocka.dll"
fi
# its print functions take C99 formats (%zu) in this build: gnu_printf, not MinGW's
# default ms_printf, for -Wformat
sed -i 's/__format__ (__printf__, a, b)/__format__ (__gnu_printf__, a, b)/' \
    "$prefix/include/cmocka.h"
cat > "$prefix/lib/pkgconfig/cmocka.pc" <<PC
prefix=$prefix
libdir=\${prefix}/lib
includedir=\${prefix}/include

Name: cmocka
Description: cmocka, static, for x86_64-w64-mingw32
Version: $(basename "$(ls -d "$src"/cmocka-*/ | head -n 1)" | sed 's/^cmocka-//')
Libs: -L\${libdir} -lcmocka
Cflags: -I\${includedir}
PC
if [ ! -f "$prefix/lib/libcjson.a" ]; then
    s=$(fetch cjson cJSON) # its tarball unpacks to cJSON-<version>
    # pi-run's and the tools' --json-schema (tools/meson.build: libcjson, optional)
    cmake_build "$s" "$src/build-cjson" -DENABLE_CJSON_TEST=OFF -DENABLE_CJSON_UTILS=OFF \
        -DENABLE_TARGET_EXPORT=OFF -DENABLE_CUSTOM_COMPILER_FLAGS=OFF
fi
cat > "$prefix/lib/pkgconfig/libcjson.pc" <<PC
prefix=$prefix
libdir=\${prefix}/lib
includedir=\${prefix}/include

Name: libcjson
Description: cJSON, static, for x86_64-w64-mingw32
Version: $(basename "$(ls -d "$src"/cJSON-*/ | head -n 1)" | sed 's/^cJSON-//')
Libs: -L\${libdir} -lcjson
Cflags: -I\${includedir}
PC
# The second cross file: where pkg-config finds them (absolute, hence generated).
cat > "$prefix/deps.ini" <<INI
# Generated by tools/cross/deps_windows.sh; use with cross/x86_64-w64-mingw32.ini.
[properties]
pkg_config_libdir = '$prefix/lib/pkgconfig'
INI
echo "deps in $prefix (cross file $prefix/deps.ini)"
