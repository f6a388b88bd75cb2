#include "util/alloc.h"

#include <stdlib.h>
#include <string.h>

static void *sys_alloc(void *user, size_t size) {
    (void)user;
    return malloc(size);
}

static void sys_free(void *user, void *ptr) {
    (void)user;
    free(ptr);
}

const struct pi_allocator pi_default_allocator = {sys_alloc, sys_free, NULL};

void *pi_malloc(const struct pi_allocator *a, size_t size) {
    return a->alloc(a->user, size ? size : 1);
}

void *pi_calloc(const struct pi_allocator *a, size_t n, size_t size) {
    if (size != 0 && n > (size_t)-1 / size)
        return NULL;
    size_t total = n * size;
    void *p = pi_malloc(a, total);
    if (p)
        memset(p, 0, total ? total : 1);
    return p;
}

void pi_free(const struct pi_allocator *a, void *ptr) {
    if (ptr)
        a->free(a->user, ptr);
}

char *pi_strndup(const struct pi_allocator *a, const char *s, size_t len) {
    if (len == (size_t)-1)
        return NULL;
    char *p = pi_malloc(a, len + 1);
    if (!p)
        return NULL;
    if (len)
        memcpy(p, s, len);
    p[len] = '\0';
    return p;
}
