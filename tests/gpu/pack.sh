#!/bin/sh
# tests/gpu/pack.sh BUILD OUT -- copy what tests/gpu/run.sh needs from a GPU build
# (-Dcuda=enabled) into the flat directory OUT, with the shared libraries a bare GPU
# machine may lack (cmocka, pcre2), so the checks run where no build tools are:
#   sh tests/gpu/pack.sh build-gpu .gpubin && (copy the tree) && sh tests/gpu/run.sh .gpubin
set -eu
B=$1 O=$2
mkdir -p "$O"
cp "$B/tests/gpu/test_gpu_kernels" "$B/tests/gpu/test_gpu_archs" "$B/tests/test_hybrid" "$B/tests/test_batch" "$B/tools/pi-bench" "$B/tools/pi-run" "$O/"
for f in "$B"/lib/libpowerinfer.so*; do
    [ -d "$f" ] || cp -P "$f" "$O/"
done
for lib in libcmocka.so.0 libpcre2-8.so.0; do
    p=$(ldconfig -p | awk -v l="$lib" '$1 == l && /x86-64/ { print $NF; exit }')
    [ -n "$p" ] && cp -L "$p" "$O/$lib"
done
# the binaries look for libpowerinfer in $ORIGIN/../lib; run.sh sets LD_LIBRARY_PATH
du -sh "$O"
