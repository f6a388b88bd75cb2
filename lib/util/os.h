/* os.h -- the operating-system layer. Every OS-specific call of the library sits
 * behind these functions: a POSIX implementation (os_posix.c) and a Windows one
 * (os_win32.c). Paths are UTF-8 on every system (Windows: converted to UTF-16 for the
 * wide-character calls). */
#ifndef PI_UTIL_OS_H
#define PI_UTIL_OS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "util/alloc.h"
#include "util/error.h"

/* ---- Files ---------------------------------------------------------------------
 *
 * Files are opened without blocking and only when they are regular: a FIFO, a
 * device or a directory is refused at once with PI_ERR_IO instead of waiting for a
 * writer or reading without end. */

/* A regular file open for reading. */
struct pi_file {
#ifdef _WIN32
    void *handle; /* HANDLE; NULL when closed */
#else
    int fd;
#endif
    uint64_t size; /* at open */
};

/* Open `path` (named in messages) for reading. PI_ERR_IO with the reason: cannot open,
 * a directory, not a regular file. */
int pi_os_file_open(const char *path, struct pi_file *f, struct pi_error *err);
/* Exactly n bytes at `offset` into buf (pread, interrupted calls resumed). PI_ERR_IO
 * with the reason, also when the file ends first ("shorter than it was"). */
int pi_os_file_read(const struct pi_file *f, uint64_t offset, void *buf, size_t n,
                    const char *path, struct pi_error *err);
void pi_os_file_close(struct pi_file *f);

/* The bytes of a whole file, read-only: mapped (pi_os_map_file) or read into memory
 * (pi_os_read_file). */
struct pi_file_map {
    const uint8_t *data; /* NULL for an empty file */
    uint64_t size;
    void *heap;          /* read: the allocation holding data; NULL when mapped */
    const struct pi_allocator *alloc; /* read: heap's allocator, borrowed until unmap */
    int locked;          /* pi_os_lock_file succeeded */
};

/* Map `path` read-only and shared (MAP_SHARED: pages come from the page cache, so a
 * change of the file on disk shows through, and a truncation makes access fault).
 * PI_ERR_IO with the OS reason on failure. */
int pi_os_map_file(const char *path, struct pi_file_map *map, struct pi_error *err);

/* Called between chunks of a long read with the bytes read so far and the total;
 * non-zero stops the read with PI_ERR_ABORTED. */
typedef int (*pi_os_read_tick)(void *user, uint64_t done, uint64_t total);

/* Read the whole of `path` into one allocation of `a` (borrowed until unmap), its
 * start aligned to the page size as a mapping's is (to 2 MiB for a file of 8 MiB or
 * more, advised into huge pages on Linux, as a mapping is too). tick may be NULL.
 * PI_ERR_IO (as pi_os_file_open / _read, or too large for memory), PI_ERR_NOMEM,
 * PI_ERR_ABORTED. */
int pi_os_read_file(const char *path, const struct pi_allocator *a, pi_os_read_tick tick,
                    void *tick_user, struct pi_file_map *map, struct pi_error *err);

/* Lock the bytes of `map` in RAM (mlock). PI_ERR_IO with the reason (typically the
 * RLIMIT_MEMLOCK limit) when the system refuses; the map stays usable either way. */
int pi_os_lock_file(struct pi_file_map *map, struct pi_error *err);

/* Unmap or free, and unlock; map is left empty. An empty map is a no-op. */
void pi_os_unmap_file(struct pi_file_map *map);

/* Create and open for writing a new file `<path>.tmp<n>` beside `path` (its name into
 * tmp[0..cap)), exclusively: it fails rather than open a file, symbolic link or FIFO
 * already there, so a temporary left by a crash, a concurrent writer or a link planted
 * in a shared directory is never written through; the first free n of 0..99 is taken.
 * The caller writes, closes and renames it over `path` (or removes it). PI_ERR_IO. */
int pi_os_create_temp(const char *path, char *tmp, size_t cap, FILE **out, struct pi_error *err);

/* PI_OK when a file written beside `path` may be renamed over it: nothing is there, or
 * a regular file, or a symbolic link (the rename replaces the link, not its target).
 * A device, FIFO, socket or directory is PI_ERR_IO: renaming over `/dev/null` as root
 * would replace the device with a regular file. pi_os_create_temp checks it. */
int pi_os_check_replaceable(const char *path, struct pi_error *err);

/* Open `path` as fopen would (mode "rb", "wb", ...), the path in UTF-8. NULL with errno
 * set on failure. */
FILE *pi_os_fopen(const char *path, const char *mode);

/* Remove a file; 0 on success. */
int pi_os_remove(const char *path);

/* Rename `from` over `to`, replacing a file there atomically where the system can.
 * PI_ERR_IO "cannot rename '<from>' to '<to>': <reason>". */
int pi_os_replace(const char *from, const char *to, struct pi_error *err);

/* Flush fp's buffers to the device (fflush + fsync), then close it, even on failure.
 * PI_ERR_IO "cannot write '<path>': <reason>". */
int pi_os_sync_close(FILE *fp, const char *path, struct pi_error *err);

/* 1 when both paths exist and name the same file (hard links included), else 0. */
int pi_os_same_file(const char *a, const char *b);

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
