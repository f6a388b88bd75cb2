#!/bin/sh
# tests/gpu/pack.sh BUILD OUT [LLAMACPP] -- copy what tests/gpu/run.sh needs from a GPU
# build (-Dcuda=enabled) into the flat directory OUT, with the shared libraries a bare
# GPU machine may lack (cmocka, pcre2), so the checks run where no build tools are:
#   sh tests/gpu/pack.sh build-gpu .gpubin && (carry .gpubin.tar.xz) &&
#   mkdir -p .gpubin && tar -xJf .gpubin.tar.xz -C .gpubin && sh tests/gpu/run.sh .gpubin
# LLAMACPP: tests/gpu/build_llamacpp.sh's output, packed as OUT/llamacpp.tar.xz for
# tests/gpu/compare.sh (which unpacks it). The device tool carries at most 64 MiB: the
# archive's size is checked.
set -eu
B=$1 O=$2 LL=${3:-}
mkdir -p "$O"
cp "$B/tests/gpu/test_gpu_kernels" "$B/tests/gpu/test_gpu_archs" "$B/tests/test_hybrid" "$B/tests/test_batch" "$B/tests/test_graphs" "$B/tools/pi-bench" "$B/tools/pi-run" "$B/tools/pi-sparsify" "$O/"
for f in "$B"/lib/libpowerinfer.so*; do
    [ -d "$f" ] || cp -P "$f" "$O/"
done
for lib in libcmocka.so.0 libpcre2-8.so.0; do
    p=$(ldconfig -p | awk -v l="$lib" '$1 == l && /x86-64/ { print $NF; exit }')
    [ -n "$p" ] && cp -L "$p" "$O/$lib"
done
if [ -n "$LL" ]; then # xz: its CUDA library alone is 47 MB (27 MB packed with the rest)
    tar -cJf "$O/llamacpp.tar.xz" -C "$LL" .
fi
# the binaries look for libpowerinfer in $ORIGIN/../lib; run.sh sets LD_LIBRARY_PATH
du -sh "$O"
# What travels: OUT.tar.xz (the test binaries link the CUDA kernels each, 12 MB apiece,
# and shrink to a fifth); unpack it there with mkdir -p OUT && tar -xJf OUT.tar.xz -C OUT
tar -cJf "$O.tar.xz" -C "$O" .
kib=$(du -sk "$O.tar.xz" | cut -f1)
echo "pack.sh: $O.tar.xz: $kib KiB"
if [ "$kib" -gt $((64 * 1024)) ]; then
    echo "pack.sh: $O.tar.xz holds $kib KiB, over the 64 MiB a device run carries" >&2
    exit 1
fi
