#!/bin/sh
# tests/gpu/build_llamacpp.sh OUT [CUDA_ARCH] -- build llama.cpp's llama-bench with CUDA,
# here (a machine with nvcc; no GPU needed), for tests/gpu/compare.sh to run on the GPU
# machine, which builds nothing. The source is the llama.cpp that the llama-cpp-python
# source package carries (vendor/llama.cpp; fetched from PyPI with pip download unless
# LLAMACPP_SRC points at an unpacked llama.cpp tree): we run it, never copy from it.
# CUDA_ARCH: the device's compute capability without the dot (default 90: H100/H200).
# Its CPU code is built for every x86 level and picked at run time (GGML_BACKEND_DL with
# GGML_CPU_ALL_VARIANTS, as llama.cpp's release builds do), so that the layers it keeps on
# the CPU get the device machine's best SIMD as ours do; the CUDA runtime and cuBLAS come
# from the device's CUDA install. Flash-attention kernels left out (GGML_CUDA_FA=OFF: a
# fraction of the build time and size; llama-bench then runs without -fa, which at the
# short contexts of compare.sh costs llama.cpp little). Writes OUT/llama-bench, its
# shared libraries (OUT/lib*.so*, found through $ORIGIN) and OUT/LLAMACPP_VERSION.
set -eu
out=${1:?usage: build_llamacpp.sh OUT [CUDA_ARCH]}
arch=${2:-90}
mkdir -p "$out"
out=$(cd "$out" && pwd)
work=${TMPDIR:-/tmp}/pi-llamacpp-build
mkdir -p "$work"
src=${LLAMACPP_SRC:-}
if [ -z "$src" ]; then
    if ! ls "$work"/llama_cpp_python-*.tar.gz >/dev/null 2>&1; then
        python3 -m pip download -q --no-binary :all: --no-deps -d "$work" llama-cpp-python
    fi
    tarball=$(ls "$work"/llama_cpp_python-*.tar.gz | tail -1)
    ver=$(basename "$tarball" .tar.gz | sed 's/^llama_cpp_python-//')
    [ -d "$work/llama_cpp_python-$ver" ] || tar -xzf "$tarball" -C "$work"
    src=$work/llama_cpp_python-$ver/vendor/llama.cpp
    echo "llama-cpp-python $ver (vendor/llama.cpp)" > "$out/LLAMACPP_VERSION"
else
    echo "llama.cpp from $src" > "$out/LLAMACPP_VERSION"
fi
[ -f "$src/CMakeLists.txt" ] || { echo "build_llamacpp.sh: no llama.cpp in $src" >&2; exit 1; }
command -v nvcc >/dev/null || { echo "build_llamacpp.sh: nvcc not found" >&2; exit 1; }
bdir=$work/build-sm$arch
cmake -S "$src" -B "$bdir" -DCMAKE_BUILD_TYPE=Release -DGGML_CUDA=ON \
    -DCMAKE_CUDA_ARCHITECTURES="$arch" -DGGML_NATIVE=OFF -DGGML_BACKEND_DL=ON \
    -DGGML_CPU_ALL_VARIANTS=ON -DBUILD_SHARED_LIBS=ON -DCMAKE_INSTALL_RPATH='$ORIGIN' \
    -DCMAKE_BUILD_WITH_INSTALL_RPATH=ON -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF \
    -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF -DGGML_CUDA_FA=OFF > "$work/cmake.log" 2>&1 ||
    { tail -20 "$work/cmake.log" >&2; exit 1; }
# llama-bench, and the backends it loads at run time (not its link dependencies): CUDA,
# and the CPU variants of today's servers (ggml picks the best one the CPU runs; x64 is
# the fallback), not all fourteen
variants=${LLAMACPP_CPU_VARIANTS:-x64 haswell skylakex icelake sapphirerapids zen4}
targets="llama-bench ggml-cuda"
for v in $variants; do targets="$targets ggml-cpu-$v"; done
cmake --build "$bdir" -j "$(nproc)" --target $targets > "$work/build.log" 2>&1 ||
    { tail -30 "$work/build.log" >&2; exit 1; }
cp "$bdir/bin/llama-bench" "$out/llama-bench"
for f in "$bdir"/bin/lib*.so* "$bdir"/lib/lib*.so* "$bdir"/*/lib*.so* "$bdir"/*/*/lib*.so*; do
    [ -f "$f" ] && cp -P "$f" "$out/"
done
strip "$out/llama-bench" "$out"/lib*.so* 2>/dev/null || true
git -C "$src" log -1 --format='commit %h %cd' 2>/dev/null >> "$out/LLAMACPP_VERSION" || true
echo "sm_$arch, GGML_CUDA_FA=OFF, CPU variants loaded at run time" >> "$out/LLAMACPP_VERSION"
ls -la "$out"
du -sh "$out"
