/* POSIX implementation of os.h. */
#define _GNU_SOURCE /* sched_getaffinity */
#include "util/os.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <pthread.h>
#include <sched.h>
#include <time.h>
#include <unistd.h>
#if defined(__x86_64__) || defined(__i386__)
#  include <immintrin.h>
#endif

int pi_os_map_file(const char *path, struct pi_file_map *map, struct pi_error *err) {
    map->data = NULL;
    map->size = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        PI_FAIL(err, PI_ERR_IO, "cannot open '%s': %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        PI_FAIL(err, PI_ERR_IO, "cannot stat '%s': %s", path, strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        PI_FAIL(err, PI_ERR_IO, "'%s' is not a regular file", path);
    }
    if (st.st_size == 0) {
        close(fd);
        return PI_OK;
    }
    if ((uint64_t)st.st_size > (uint64_t)SIZE_MAX) {
        close(fd);
        PI_FAIL(err, PI_ERR_IO, "'%s' is too large to map on this system", path);
    }
    void *p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
    int e = errno;
    close(fd);
    if (p == MAP_FAILED)
        PI_FAIL(err, PI_ERR_IO, "cannot map '%s': %s", path, strerror(e));
    map->data = p;
    map->size = (uint64_t)st.st_size;
    return PI_OK;
}

void pi_os_unmap_file(struct pi_file_map *map) {
    if (map->data)
        munmap((void *)map->data, (size_t)map->size);
    map->data = NULL;
    map->size = 0;
}

struct pi_thread {
    pthread_t id;
    void (*fn)(void *);
    void *arg;
};

static void *thread_main(void *p) {
    struct pi_thread *t = p;
    t->fn(t->arg);
    return NULL;
}

int pi_os_thread_start(struct pi_thread **out, const struct pi_allocator *a,
                       void (*fn)(void *arg), void *arg) {
    *out = NULL;
    struct pi_thread *t = pi_calloc(a, 1, sizeof *t);
    if (!t)
        return PI_ERR_NOMEM;
    t->fn = fn;
    t->arg = arg;
    if (pthread_create(&t->id, NULL, thread_main, t) != 0) {
        pi_free(a, t);
        return PI_ERR_INTERNAL;
    }
    *out = t;
    return PI_OK;
}

void pi_os_thread_join(struct pi_thread *t, const struct pi_allocator *a) {
    if (!t)
        return;
    pthread_join(t->id, NULL);
    pi_free(a, t);
}

struct pi_waiter {
    pthread_mutex_t mu;
    pthread_cond_t cv;
};

int pi_os_waiter_create(struct pi_waiter **out, const struct pi_allocator *a) {
    *out = NULL;
    struct pi_waiter *w = pi_calloc(a, 1, sizeof *w);
    if (!w)
        return PI_ERR_NOMEM;
    if (pthread_mutex_init(&w->mu, NULL) != 0) {
        pi_free(a, w);
        return PI_ERR_INTERNAL;
    }
    if (pthread_cond_init(&w->cv, NULL) != 0) {
        pthread_mutex_destroy(&w->mu);
        pi_free(a, w);
        return PI_ERR_INTERNAL;
    }
    *out = w;
    return PI_OK;
}

void pi_os_waiter_destroy(struct pi_waiter *w, const struct pi_allocator *a) {
    if (!w)
        return;
    pthread_cond_destroy(&w->cv);
    pthread_mutex_destroy(&w->mu);
    pi_free(a, w);
}

void pi_os_waiter_lock(struct pi_waiter *w) {
    pthread_mutex_lock(&w->mu);
}

void pi_os_waiter_unlock(struct pi_waiter *w) {
    pthread_mutex_unlock(&w->mu);
}

void pi_os_waiter_wait(struct pi_waiter *w) {
    pthread_cond_wait(&w->cv, &w->mu);
}

void pi_os_waiter_broadcast(struct pi_waiter *w) {
    pthread_cond_broadcast(&w->cv);
}

int pi_os_n_cpus(void) {
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0) {
        int n = CPU_COUNT(&set);
        if (n > 0)
            return n;
    }
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

uint64_t pi_os_time_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

void pi_os_cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    _mm_pause();
#endif
}

void pi_os_yield(void) {
    sched_yield();
}
