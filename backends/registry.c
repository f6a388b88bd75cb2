/* registry.c -- the backends compiled into this library: the only file with
 * build-conditional code (PI_HAVE_CUDA, PI_HAVE_HIP from meson). */
#include "backend.h"

#if defined(PI_HAVE_CUDA) || defined(PI_HAVE_HIP)
const struct pi_backend_vtable *pi_backend_cuda_vtable(void);
#endif

const struct pi_backend_vtable *pi_backend_gpu(void) {
#if defined(PI_HAVE_CUDA) || defined(PI_HAVE_HIP)
    return pi_backend_cuda_vtable();
#else
    return (const struct pi_backend_vtable *)0;
#endif
}
