/* compat.h -- the one place where CUDA and HIP differ for the GPU backend.
 *
 * The backend is written against the CUDA runtime API; compiled by hipcc (the build
 * passes -DPI_HIP; clang's HIP mode defines __HIP__, AMD's platform headers
 * __HIP_PLATFORM_AMD__) the cuda* names it uses are mapped to their hip* twins here,
 * so the .cu files carry no #ifdefs. Device code sees:
 *   PI_WARP            the warp (wavefront) width of the target being compiled: 32 on
 *                      NVIDIA; on AMD 64 (gfx9, CDNA: gfx90a) or 32 (gfx10+, RDNA:
 *                      gfx1030), from clang's per-target __AMDGCN_WAVEFRONT_SIZE. Host
 *                      code must not use it (one HIP binary holds both widths): it
 *                      reads the device's warpSize property instead.
 *   pi_shfl_xor(v, m)  butterfly exchange across the whole warp.
 *   pi_h2f(bits)       binary16 to binary32 (hardware conversion).
 * and host code gets pi_gpu_upload_needs_sync(src) (see cuda_backend.cu, upload).
 *
 * Floating-point contraction is disabled for the device code at build time (nvcc
 * -fmad=false, hipcc -ffp-contract=off) so the dequantizers are bit-exact with
 * lib/runtime/dequant.c; accumulations use fmaf explicitly. */
#ifndef PI_CUDA_COMPAT_H
#define PI_CUDA_COMPAT_H

#include <stdint.h>

#if defined(PI_HIP) || defined(__HIP_PLATFORM_AMD__) || defined(__HIP__)
#  define PI_GPU_HIP 1
#  include <hip/hip_fp16.h>
#  include <hip/hip_runtime.h>

#  define cudaDeviceProp                  hipDeviceProp_t
#  define cudaError_t                     hipError_t
#  define cudaErrorInsufficientDriver     hipErrorInsufficientDriver
#  define cudaErrorInvalidDevice          hipErrorInvalidDevice
#  define cudaErrorInvalidDeviceFunction  hipErrorInvalidDeviceFunction
#  define cudaErrorMemoryAllocation       hipErrorOutOfMemory
#  define cudaErrorNoDevice               hipErrorNoDevice
#  define cudaErrorNoKernelImageForDevice hipErrorNoBinaryForGpu
#  define cudaFree                        hipFree
#  define cudaGraphExec_t                 hipGraphExec_t
#  define cudaGetDeviceCount              hipGetDeviceCount
#  define cudaGetDeviceProperties         hipGetDeviceProperties
#  define cudaGetErrorString              hipGetErrorString
#  define cudaGetLastError                hipGetLastError
#  define cudaMalloc                      hipMalloc
#  define cudaMemGetInfo                  hipMemGetInfo
#  define cudaMemcpyAsync                 hipMemcpyAsync
#  define cudaMemcpyDeviceToHost          hipMemcpyDeviceToHost
#  define cudaMemcpyHostToDevice          hipMemcpyHostToDevice
#  define cudaSetDevice                   hipSetDevice
#  define cudaStreamCreateWithFlags       hipStreamCreateWithFlags
#  define cudaStreamDestroy               hipStreamDestroy
#  define cudaStreamNonBlocking           hipStreamNonBlocking
#  define cudaStreamSynchronize           hipStreamSynchronize
#  define cudaStream_t                    hipStream_t
#  define cudaSuccess                     hipSuccess

#  ifdef __AMDGCN_WAVEFRONT_SIZE
#    define PI_WARP __AMDGCN_WAVEFRONT_SIZE
#  else
#    define PI_WARP 64 /* host compilation pass: no device code is generated there */
#  endif

static __device__ __forceinline__ float pi_shfl_xor(float v, int mask) {
    return __shfl_xor(v, mask, PI_WARP);
}

/* HIP promises nothing about when hipMemcpyAsync is done reading pageable host
 * memory, so every upload waits for its copy. */
static inline int pi_gpu_upload_needs_sync(const void *src) {
    (void)src;
    return 1;
}

#else /* CUDA */
#  define PI_GPU_HIP 0
#  include <cuda_fp16.h>
#  include <cuda_runtime.h>

#  define PI_WARP 32

static __device__ __forceinline__ float pi_shfl_xor(float v, int mask) {
    return __shfl_xor_sync(0xffffffffu, v, mask, PI_WARP);
}

/* cudaMemcpyAsync from pageable memory returns once the source has been staged, so
 * the caller may reuse it at once; from page-locked or managed memory it returns
 * before the copy ran, so such an upload waits for it. */
static inline int pi_gpu_upload_needs_sync(const void *src) {
    cudaPointerAttributes a;
    if (cudaPointerGetAttributes(&a, src) != cudaSuccess) {
        (void)cudaGetLastError(); /* not sticky: clear it for the next launch check */
        return 1;
    }
    return a.type == cudaMemoryTypeHost || a.type == cudaMemoryTypeManaged;
}
#endif

/* binary16 bits -> binary32 with the hardware conversion: exact for every pattern
 * (subnormals included; a NaN stays a NaN). */
static __device__ __forceinline__ float pi_h2f(uint32_t h) {
    return __half2float(__ushort_as_half((unsigned short)h));
}

/* Sum over the warp; every lane gets the total. Works for either warp width. */
static __device__ __forceinline__ float pi_warp_sum(float v) {
#pragma unroll
    for (int m = PI_WARP / 2; m > 0; m /= 2)
        v += pi_shfl_xor(v, m);
    return v;
}

#endif
