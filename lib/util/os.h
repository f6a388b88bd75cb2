/* os.h -- the operating-system layer. Every OS-specific call of the library sits
 * behind these functions: a POSIX implementation (os_posix.c) now, room for a
 * Windows one. */
#ifndef PI_UTIL_OS_H
#define PI_UTIL_OS_H

#include <stdint.h>

#include "util/alloc.h"
#include "util/error.h"

/* A read-only mapping of a whole file. */
struct pi_file_map {
    const uint8_t *data; /* NULL for an empty file */
    uint64_t size;
};

/* Map `path` read-only. PI_ERR_IO with the OS reason on failure. */
int pi_os_map_file(const char *path, struct pi_file_map *map, struct pi_error *err);
void pi_os_unmap_file(struct pi_file_map *map);

/* ---- Threads ------------------------------------------------------------------- */

struct pi_thread;
/* Start fn(arg) on a new thread. PI_ERR_NOMEM / PI_ERR_INTERNAL on failure. */
int pi_os_thread_start(struct pi_thread **t, const struct pi_allocator *a,
                       void (*fn)(void *arg), void *arg);
/* Wait for the thread to finish and release it. */
void pi_os_thread_join(struct pi_thread *t, const struct pi_allocator *a);

/* A mutex + condition variable pair for sleeping waits. */
struct pi_waiter;
int pi_os_waiter_create(struct pi_waiter **w, const struct pi_allocator *a);
void pi_os_waiter_destroy(struct pi_waiter *w, const struct pi_allocator *a);
void pi_os_waiter_lock(struct pi_waiter *w);
void pi_os_waiter_unlock(struct pi_waiter *w);
void pi_os_waiter_wait(struct pi_waiter *w);      /* lock held */
void pi_os_waiter_broadcast(struct pi_waiter *w); /* lock held */

/* Processors available to this process (at least 1). */
int pi_os_n_cpus(void);
/* Monotonic time in nanoseconds. */
uint64_t pi_os_time_ns(void);
/* Hint to the CPU inside a spin loop. */
void pi_os_cpu_relax(void);
/* Give the processor to another runnable thread, if any. */
void pi_os_yield(void);

#endif
