/* pool.h -- the worker threads a context owns (no OpenMP). pi_pool_run runs one
 * function on every thread, the caller being thread 0, and returns when all are done.
 * Workers spin briefly for the next job (decode dispatches hundreds of small jobs per
 * token), then sleep on a condition variable. */
#ifndef PI_RUNTIME_POOL_H
#define PI_RUNTIME_POOL_H

#include "util/alloc.h"

struct pi_pool;
typedef void (*pi_pool_fn)(void *arg, int ith, int nth);

int pi_pool_create(struct pi_pool **out, int n_threads, const struct pi_allocator *a);
void pi_pool_destroy(struct pi_pool *p);
void pi_pool_run(struct pi_pool *p, pi_pool_fn fn, void *arg);
int pi_pool_n_threads(const struct pi_pool *p);

/* The share [*lo, *hi) of `n` items for thread ith of nth, in chunks of `align`. */
static inline void pi_pool_split(long long n, int ith, int nth, long long align, long long *lo,
                                 long long *hi) {
    long long chunks = (n + align - 1) / align;
    long long per = chunks / nth, extra = chunks % nth;
    long long c0 = ith * per + (ith < extra ? ith : extra);
    long long c1 = c0 + per + (ith < extra);
    *lo = c0 * align < n ? c0 * align : n;
    *hi = c1 * align < n ? c1 * align : n;
}

#endif
