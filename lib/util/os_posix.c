/* POSIX implementation of os.h. */
#define _GNU_SOURCE /* sched_getaffinity (Linux; the rest of this file is plain POSIX) */
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

static const char *kind_of(mode_t mode) {
    if (S_ISDIR(mode))
        return "a directory";
    if (S_ISFIFO(mode))
        return "a FIFO";
    if (S_ISCHR(mode) || S_ISBLK(mode))
        return "a device";
    return "a socket or another special file";
}

int pi_os_file_open(const char *path, struct pi_file *f, struct pi_error *err) {
    f->fd = -1;
    f->size = 0;
    /* O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer, before
     * fstat could tell what it is. */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
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
        PI_FAIL(err, PI_ERR_IO, "'%s' is %s, not a regular file", path, kind_of(st.st_mode));
    }
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) != 0) {
        int e = errno;
        close(fd);
        PI_FAIL(err, PI_ERR_IO, "cannot use '%s': %s", path, strerror(e));
    }
    f->fd = fd;
    f->size = (uint64_t)st.st_size;
    return PI_OK;
}

int pi_os_file_read(const struct pi_file *f, uint64_t offset, void *buf, size_t n,
                    const char *path, struct pi_error *err) {
    uint8_t *p = buf;
    while (n > 0) {
        /* at most 1 GiB a call: more than SSIZE_MAX is undefined (and Linux moves at
         * most 0x7ffff000 bytes anyway; the loop takes short reads) */
        size_t chunk = n < ((size_t)1 << 30) ? n : ((size_t)1 << 30);
        ssize_t got = pread(f->fd, p, chunk, (off_t)offset);
        if (got < 0 && errno == EINTR)
            continue;
        if (got < 0)
            PI_FAIL(err, PI_ERR_IO, "cannot read '%s': %s", path, strerror(errno));
        if (got == 0)
            PI_FAIL(err, PI_ERR_IO, "'%s' ends at byte %llu: it is shorter than it was when "
                    "opened (changed on disk?)", path, (unsigned long long)offset);
        p += got;
        offset += (uint64_t)got;
        n -= (size_t)got;
    }
    return PI_OK;
}

void pi_os_file_close(struct pi_file *f) {
    if (f->fd >= 0)
        close(f->fd);
    f->fd = -1;
}

static void empty_map(struct pi_file_map *map) {
    memset(map, 0, sizeof *map);
}

static size_t page_size(void) {
    long n = sysconf(_SC_PAGESIZE);
    return n > 0 ? (size_t)n : 4096;
}

/* Transparent huge pages for the whole 2 MiB pages of [p, p + n) (Linux; elsewhere,
 * or where the system has them off or refuses, nothing happens). A decode step reads
 * every weight once: with 4 KiB pages that is a TLB miss per 4 KiB, and in huge pages
 * a read copy decoded 1.2-1.4x faster (docs/performance.md, design.md). A mapping gets
 * them where the page cache holds the file in huge folios (xfs; ext4 from Linux 6.16);
 * a read copy when advised before its pages are first written. */
#define HUGE_PAGE ((size_t)2 << 20)
static void advise_huge(const void *p, size_t n) {
#ifdef MADV_HUGEPAGE
    const uintptr_t a = ((uintptr_t)p + HUGE_PAGE - 1) & ~(uintptr_t)(HUGE_PAGE - 1);
    const uintptr_t e = ((uintptr_t)p + n) & ~(uintptr_t)(HUGE_PAGE - 1);
    if (e > a)
        (void)madvise((void *)a, e - a, MADV_HUGEPAGE);
#else
    (void)p;
    (void)n;
#endif
}

int pi_os_map_file(const char *path, struct pi_file_map *map, struct pi_error *err) {
    empty_map(map);
    struct pi_file f;
    PI_TRY(pi_os_file_open(path, &f, err));
    if (f.size == 0) {
        pi_os_file_close(&f);
        return PI_OK;
    }
    if (f.size > (uint64_t)SIZE_MAX) {
        pi_os_file_close(&f);
        PI_FAIL(err, PI_ERR_IO, "'%s' is too large to map on this system", path);
    }
    void *p = mmap(NULL, (size_t)f.size, PROT_READ, MAP_SHARED, f.fd, 0);
    int e = errno;
    pi_os_file_close(&f);
    if (p == MAP_FAILED)
        PI_FAIL(err, PI_ERR_IO, "cannot map '%s': %s", path, strerror(e));
    advise_huge(p, (size_t)f.size);
    map->data = p;
    map->size = f.size;
    return PI_OK;
}

int pi_os_read_file(const char *path, const struct pi_allocator *a, pi_os_read_tick tick,
                    void *tick_user, struct pi_file_map *map, struct pi_error *err) {
    empty_map(map);
    struct pi_file f;
    PI_TRY(pi_os_file_open(path, &f, err));
    /* a file of several huge pages starts on one, so that all its whole ones are */
    const size_t align = f.size >= 4 * HUGE_PAGE ? HUGE_PAGE : page_size();
    int st = PI_OK;
    if (f.size > (uint64_t)SIZE_MAX - align) {
        st = pi_error_set(err, PI_ERR_IO, "'%s' is too large to read into memory on this "
                          "system", path);
    } else if (f.size > 0) {
        map->heap = pi_malloc(a, (size_t)f.size + align - 1);
        if (!map->heap)
            st = pi_error_set(err, PI_ERR_NOMEM, "out of memory for a copy of the file "
                              "(%llu bytes)", (unsigned long long)f.size);
    }
    if (map->heap) {
        map->alloc = a;
        uint8_t *base = (uint8_t *)(((uintptr_t)map->heap + align - 1) & ~(uintptr_t)(align - 1));
        advise_huge(base, (size_t)f.size); /* before the pages are first written */
        /* chunks of 64 MiB: the caller sees progress and may stop a long read */
        const size_t chunk = (size_t)64 << 20;
        for (uint64_t done = 0; st == PI_OK && done < f.size;) {
            size_t n = f.size - done < chunk ? (size_t)(f.size - done) : chunk;
            st = pi_os_file_read(&f, done, base + done, n, path, err);
            done += n;
            if (st == PI_OK && tick && tick(tick_user, done, f.size))
                st = pi_error_set(err, PI_ERR_ABORTED, "reading the file aborted by the "
                                  "caller");
        }
        map->data = base;
        map->size = f.size;
    }
    pi_os_file_close(&f);
    if (st < 0)
        pi_os_unmap_file(map);
    return st;
}

int pi_os_lock_file(struct pi_file_map *map, struct pi_error *err) {
    if (!map->data || map->locked)
        return PI_OK;
    if (mlock(map->data, (size_t)map->size) != 0) {
        int e = errno;
        PI_FAIL(err, PI_ERR_IO, "cannot lock %llu bytes in memory: %s%s",
                (unsigned long long)map->size, strerror(e),
                e == ENOMEM || e == EPERM ? " (raise the locked-memory limit, ulimit -l, "
                                            "or run with CAP_IPC_LOCK)" : "");
    }
    map->locked = 1;
    return PI_OK;
}

void pi_os_unmap_file(struct pi_file_map *map) {
    if (map->locked)
        munlock(map->data, (size_t)map->size);
    if (map->heap)
        pi_free(map->alloc, map->heap);
    else if (map->data)
        munmap((void *)map->data, (size_t)map->size);
    empty_map(map);
}

int pi_os_check_replaceable(const char *path, struct pi_error *err) {
    struct stat st;
    if (lstat(path, &st) != 0) {
        if (errno == ENOENT)
            return PI_OK;
        PI_FAIL(err, PI_ERR_IO, "cannot stat '%s': %s", path, strerror(errno));
    }
    if (S_ISREG(st.st_mode) || S_ISLNK(st.st_mode))
        return PI_OK;
    PI_FAIL(err, PI_ERR_IO, "'%s' is %s: it would be replaced by a regular file; write to a "
            "file name instead", path, kind_of(st.st_mode));
}

int pi_os_create_temp(const char *path, char *tmp, size_t cap, FILE **out,
                      struct pi_error *err) {
    *out = NULL;
    PI_TRY(pi_os_check_replaceable(path, err));
    for (int n = 0; n < 100; n++) {
        if ((size_t)snprintf(tmp, cap, "%s.tmp%d", path, n) >= cap)
            PI_FAIL(err, PI_ERR_IO, "path too long: '%s'", path);
        /* O_EXCL: an existing name, a dangling or live symbolic link included, fails
         * with EEXIST instead of being opened (and a FIFO is never waited on) */
        int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
        if (fd < 0) {
            if (errno == EEXIST)
                continue;
            PI_FAIL(err, PI_ERR_IO, "cannot create '%s': %s", tmp, strerror(errno));
        }
        FILE *fp = fdopen(fd, "wb");
        if (!fp) {
            const int e = errno;
            close(fd);
            remove(tmp);
            PI_FAIL(err, PI_ERR_IO, "cannot open '%s': %s", tmp, strerror(e));
        }
        *out = fp;
        return PI_OK;
    }
    PI_FAIL(err, PI_ERR_IO, "cannot create a temporary file next to '%s': %s.tmp0..99 all "
            "exist", path, path);
}

FILE *pi_os_fopen(const char *path, const char *mode) {
    return fopen(path, mode);
}

int pi_os_remove(const char *path) {
    return remove(path);
}

int pi_os_replace(const char *from, const char *to, struct pi_error *err) {
    if (rename(from, to) != 0)
        PI_FAIL(err, PI_ERR_IO, "cannot rename '%s' to '%s': %s", from, to, strerror(errno));
    return PI_OK;
}

int pi_os_sync_close(FILE *fp, const char *path, struct pi_error *err) {
    errno = 0;
    int ok = fflush(fp) == 0 && fsync(fileno(fp)) == 0;
    int e = errno;
    if (fclose(fp) != 0 && ok) {
        ok = 0;
        e = errno;
    }
    if (!ok)
        PI_FAIL(err, PI_ERR_IO, "cannot write '%s': %s", path, strerror(e));
    return PI_OK;
}

int pi_os_same_file(const char *a, const char *b) {
    struct stat sa, sb;
    return stat(a, &sa) == 0 && stat(b, &sb) == 0 && sa.st_dev == sb.st_dev &&
           sa.st_ino == sb.st_ino;
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
#if defined(__linux__)
    /* the processors this process may run on (taskset, cgroups' cpusets), Linux only */
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0) {
        int n = CPU_COUNT(&set);
        if (n > 0)
            return n;
    }
#endif
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
