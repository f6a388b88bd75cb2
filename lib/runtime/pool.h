/* pool.h -- the worker threads a context owns (no OpenMP).
 *
 * pi_pool_for splits n items into fixed chunks of `grain` items; the caller (thread 0)
 * and the workers take chunks from a shared counter until none are left, and the call
 * returns when every chunk is done. Because chunks are claimed dynamically, a worker
 * that the OS has not scheduled (a busy machine) delays nothing: the others take its
 * share. Because chunk boundaries depend only on n and grain, each output is computed
 * the same way for any thread count. Workers spin briefly for the next job (decode
 * dispatches hundreds of small jobs per token), then yield, then sleep. */
#ifndef PI_RUNTIME_POOL_H
#define PI_RUNTIME_POOL_H

#include <stdint.h>

#include "util/alloc.h"

struct pi_pool;
/* Process items [lo, hi) on thread `ith` (0 <= ith < threads; for per-thread
 * scratch). */
typedef void (*pi_pool_fn)(void *arg, int64_t lo, int64_t hi, int ith);

int pi_pool_create(struct pi_pool **out, int n_threads, const struct pi_allocator *a);
void pi_pool_destroy(struct pi_pool *p);
/* Run fn over [0, n) in chunks of `grain` (>= 1) items. At most 2^20 chunks. */
void pi_pool_for(struct pi_pool *p, int64_t n, int64_t grain, pi_pool_fn fn, void *arg);
int pi_pool_n_threads(const struct pi_pool *p);

#endif
