/* alloc.h -- the one heap allocation wrapper of the library.
 *
 * Every heap allocation goes through a pi_allocator so that tests can fail the Nth
 * allocation and prove that each error path cleans up (SQLite/zstd practice). The
 * allocator is carried by the objects that allocate; there is no global hook. */
#ifndef PI_UTIL_ALLOC_H
#define PI_UTIL_ALLOC_H

#include <stddef.h>

struct pi_allocator {
    /* Returns NULL on failure. `size` is never 0. */
    void *(*alloc)(void *user, size_t size);
    /* Accepts NULL. */
    void (*free)(void *user, void *ptr);
    void *user;
};

/* The C library's malloc/free. */
extern const struct pi_allocator pi_default_allocator;

void *pi_malloc(const struct pi_allocator *a, size_t size);
/* n * size bytes, zeroed; NULL if the product overflows or the allocation fails. */
void *pi_calloc(const struct pi_allocator *a, size_t n, size_t size);
void pi_free(const struct pi_allocator *a, void *ptr);
/* A NUL-terminated copy of the `len` bytes at s. */
char *pi_strndup(const struct pi_allocator *a, const char *s, size_t len);

#endif
