/* failalloc.h -- an allocator that fails the Nth allocation and counts live blocks,
 * for the allocation-failure tests. */
#ifndef PI_TESTS_FAILALLOC_H
#define PI_TESTS_FAILALLOC_H

#include <stdlib.h>

#include "util/alloc.h"

struct failalloc {
    long fail_at; /* 1-based index of the allocation to fail; 0: never */
    long count;   /* allocations attempted */
    long live;    /* blocks not yet freed */
};

static inline void *failalloc_alloc(void *user, size_t size) {
    struct failalloc *f = user;
    f->count++;
    if (f->fail_at && f->count == f->fail_at)
        return NULL;
    void *p = malloc(size);
    if (p)
        f->live++;
    return p;
}

static inline void failalloc_free(void *user, void *p) {
    struct failalloc *f = user;
    if (p)
        f->live--;
    free(p);
}

static inline struct pi_allocator failalloc_make(struct failalloc *f, long fail_at) {
    f->fail_at = fail_at;
    f->count = 0;
    f->live = 0;
    struct pi_allocator a = {failalloc_alloc, failalloc_free, f};
    return a;
}

#endif
