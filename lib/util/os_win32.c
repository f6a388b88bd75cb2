/* Windows implementation of os.h (Windows 7 and later; built with mingw-w64, and
 * written for MSVC too). Paths arrive in UTF-8 and are converted to UTF-16 for the
 * wide-character calls; failures carry the system's reason (FormatMessage). */
#ifndef WIN32_LEAN_AND_MEAN
#  define WIN32_LEAN_AND_MEAN
#endif
#ifndef NOMINMAX
#  define NOMINMAX
#endif
#include "util/os.h"

#include <windows.h>
#include <errno.h>
#include <fcntl.h>
#include <io.h>
#include <process.h>
#include <stdlib.h>
#include <string.h>

/* ---- Helpers -------------------------------------------------------------------- */

/* The system's message for `code`, without its trailing period and line break. */
static const char *win_reason(DWORD code, char *buf, size_t cap) {
    DWORD n = FormatMessageA(FORMAT_MESSAGE_FROM_SYSTEM | FORMAT_MESSAGE_IGNORE_INSERTS, NULL,
                             code, MAKELANGID(LANG_NEUTRAL, SUBLANG_DEFAULT), buf, (DWORD)cap,
                             NULL);
    while (n > 0 && (buf[n - 1] == '\r' || buf[n - 1] == '\n' || buf[n - 1] == '.' ||
                     buf[n - 1] == ' '))
        buf[--n] = '\0';
    if (n == 0)
        snprintf(buf, cap, "Windows error %lu", (unsigned long)code);
    return buf;
}

#define REASON(code) win_reason((code), reason_buf_, sizeof reason_buf_)
#define REASON_BUF char reason_buf_[256]

/* `path` (UTF-8) as a new UTF-16 string (free()), or NULL with the error in
 * GetLastError (ERROR_NO_UNICODE_TRANSLATION for invalid UTF-8). */
static wchar_t *wide(const char *path) {
    int n = MultiByteToWideChar(CP_UTF8, MB_ERR_INVALID_CHARS, path, -1, NULL, 0);
    if (n <= 0)
        return NULL;
    wchar_t *w = malloc((size_t)n * sizeof *w);
    if (!w) {
        SetLastError(ERROR_NOT_ENOUGH_MEMORY);
        return NULL;
    }
    if (MultiByteToWideChar(CP_UTF8, MB_ERR_INVALID_CHARS, path, -1, w, n) != n) {
        free(w);
        return NULL;
    }
    return w;
}

/* errno for the usual Windows errors, for the callers of the FILE-level functions. */
static int errno_of(DWORD code) {
    switch (code) {
    case ERROR_FILE_NOT_FOUND:
    case ERROR_PATH_NOT_FOUND:
    case ERROR_INVALID_NAME:
        return ENOENT;
    case ERROR_ACCESS_DENIED:
    case ERROR_SHARING_VIOLATION:
    case ERROR_LOCK_VIOLATION:
        return EACCES;
    case ERROR_FILE_EXISTS:
    case ERROR_ALREADY_EXISTS:
        return EEXIST;
    case ERROR_NOT_ENOUGH_MEMORY:
    case ERROR_OUTOFMEMORY:
        return ENOMEM;
    case ERROR_NO_UNICODE_TRANSLATION:
        return EILSEQ;
    default:
        return EIO;
    }
}

/* ---- Files ---------------------------------------------------------------------- */

static const char *kind_of_handle(HANDLE h) {
    switch (GetFileType(h)) {
    case FILE_TYPE_PIPE:
        return "a pipe or socket";
    case FILE_TYPE_CHAR:
        return "a device";
    default:
        return "not a disk file";
    }
}

int pi_os_file_open(const char *path, struct pi_file *f, struct pi_error *err) {
    REASON_BUF;
    f->handle = NULL;
    f->size = 0;
    wchar_t *w = wide(path);
    if (!w)
        PI_FAIL(err, PI_ERR_IO, "cannot open '%s': %s", path, REASON(GetLastError()));
    /* FILE_FLAG_BACKUP_SEMANTICS lets a directory be opened, to be refused below with
     * a clear message rather than an "access denied". FILE_SHARE_DELETE: the file may
     * be renamed or removed while open, as POSIX allows. */
    HANDLE h = CreateFileW(w, GENERIC_READ, FILE_SHARE_READ | FILE_SHARE_WRITE |
                           FILE_SHARE_DELETE, NULL, OPEN_EXISTING,
                           FILE_ATTRIBUTE_NORMAL | FILE_FLAG_BACKUP_SEMANTICS, NULL);
    DWORD e = GetLastError();
    free(w);
    if (h == INVALID_HANDLE_VALUE)
        PI_FAIL(err, PI_ERR_IO, "cannot open '%s': %s", path, REASON(e));
    if (GetFileType(h) != FILE_TYPE_DISK) {
        const char *kind = kind_of_handle(h);
        CloseHandle(h);
        PI_FAIL(err, PI_ERR_IO, "'%s' is %s, not a regular file", path, kind);
    }
    BY_HANDLE_FILE_INFORMATION info;
    if (!GetFileInformationByHandle(h, &info)) {
        e = GetLastError();
        CloseHandle(h);
        PI_FAIL(err, PI_ERR_IO, "cannot stat '%s': %s", path, REASON(e));
    }
    if (info.dwFileAttributes & FILE_ATTRIBUTE_DIRECTORY) {
        CloseHandle(h);
        PI_FAIL(err, PI_ERR_IO, "'%s' is a directory, not a regular file", path);
    }
    f->handle = h;
    f->size = ((uint64_t)info.nFileSizeHigh << 32) | info.nFileSizeLow;
    return PI_OK;
}

int pi_os_file_read(const struct pi_file *f, uint64_t offset, void *buf, size_t n,
                    const char *path, struct pi_error *err) {
    REASON_BUF;
    uint8_t *p = buf;
    while (n > 0) {
        /* ReadFile takes a DWORD count: at most 1 GiB a call */
        DWORD chunk = n < ((size_t)1 << 30) ? (DWORD)n : (DWORD)1 << 30;
        OVERLAPPED ov;
        memset(&ov, 0, sizeof ov);
        ov.Offset = (DWORD)(offset & 0xffffffffu);
        ov.OffsetHigh = (DWORD)(offset >> 32);
        DWORD got = 0;
        if (!ReadFile((HANDLE)f->handle, p, chunk, &got, &ov)) {
            DWORD e = GetLastError();
            if (e != ERROR_HANDLE_EOF)
                PI_FAIL(err, PI_ERR_IO, "cannot read '%s': %s", path, REASON(e));
            got = 0;
        }
        if (got == 0)
            PI_FAIL(err, PI_ERR_IO, "'%s' ends at byte %llu: it is shorter than it was when "
                    "opened (changed on disk?)", path, (unsigned long long)offset);
        p += got;
        offset += got;
        n -= got;
    }
    return PI_OK;
}

void pi_os_file_close(struct pi_file *f) {
    if (f->handle)
        CloseHandle((HANDLE)f->handle);
    f->handle = NULL;
}

static void empty_map(struct pi_file_map *map) {
    memset(map, 0, sizeof *map);
}

int pi_os_map_file(const char *path, struct pi_file_map *map, struct pi_error *err) {
    REASON_BUF;
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
    /* The view keeps the section, and the section the file, open: both handles may be
     * closed now. */
    HANDLE sec = CreateFileMappingW((HANDLE)f.handle, NULL, PAGE_READONLY, 0, 0, NULL);
    DWORD e = GetLastError();
    pi_os_file_close(&f);
    if (!sec)
        PI_FAIL(err, PI_ERR_IO, "cannot map '%s': %s", path, REASON(e));
    void *p = MapViewOfFile(sec, FILE_MAP_READ, 0, 0, (SIZE_T)f.size);
    e = GetLastError();
    CloseHandle(sec);
    if (!p)
        PI_FAIL(err, PI_ERR_IO, "cannot map '%s': %s", path, REASON(e));
    map->data = p;
    map->size = f.size;
    return PI_OK;
}

static size_t page_size(void) {
    SYSTEM_INFO si;
    GetSystemInfo(&si);
    return si.dwPageSize > 0 ? (size_t)si.dwPageSize : 4096;
}

int pi_os_read_file(const char *path, const struct pi_allocator *a, pi_os_read_tick tick,
                    void *tick_user, struct pi_file_map *map, struct pi_error *err) {
    empty_map(map);
    struct pi_file f;
    PI_TRY(pi_os_file_open(path, &f, err));
    const size_t align = page_size();
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
    REASON_BUF;
    if (!map->data || map->locked)
        return PI_OK;
    if (!VirtualLock((void *)map->data, (SIZE_T)map->size)) {
        DWORD e = GetLastError();
        PI_FAIL(err, PI_ERR_IO, "cannot lock %llu bytes in memory: %s%s",
                (unsigned long long)map->size, REASON(e),
                e == ERROR_WORKING_SET_QUOTA || e == ERROR_NOT_ENOUGH_QUOTA
                    ? " (the process's minimum working set is smaller; see "
                      "SetProcessWorkingSetSize)" : "");
    }
    map->locked = 1;
    return PI_OK;
}

void pi_os_unmap_file(struct pi_file_map *map) {
    if (map->locked)
        VirtualUnlock((void *)map->data, (SIZE_T)map->size);
    if (map->heap)
        pi_free(map->alloc, map->heap);
    else if (map->data)
        UnmapViewOfFile(map->data);
    empty_map(map);
}

int pi_os_check_replaceable(const char *path, struct pi_error *err) {
    REASON_BUF;
    wchar_t *w = wide(path);
    if (!w)
        PI_FAIL(err, PI_ERR_IO, "cannot stat '%s': %s", path, REASON(GetLastError()));
    DWORD attr = GetFileAttributesW(w);
    DWORD e = GetLastError();
    if (attr == INVALID_FILE_ATTRIBUTES) {
        free(w);
        if (e == ERROR_FILE_NOT_FOUND || e == ERROR_PATH_NOT_FOUND)
            return PI_OK;
        PI_FAIL(err, PI_ERR_IO, "cannot stat '%s': %s", path, REASON(e));
    }
    if (attr & FILE_ATTRIBUTE_DIRECTORY) {
        free(w);
        PI_FAIL(err, PI_ERR_IO, "'%s' is a directory: it would be replaced by a regular "
                "file; write to a file name instead", path);
    }
    /* A symbolic link (a reparse point) is replaced, not followed, by the rename, as on
     * POSIX. Otherwise it must be a disk file: NUL, CON, COM1 and pipes are not. */
    int st = PI_OK;
    if (!(attr & FILE_ATTRIBUTE_REPARSE_POINT)) {
        HANDLE h = CreateFileW(w, 0, FILE_SHARE_READ | FILE_SHARE_WRITE | FILE_SHARE_DELETE,
                               NULL, OPEN_EXISTING, FILE_FLAG_BACKUP_SEMANTICS, NULL);
        if (h != INVALID_HANDLE_VALUE) {
            if (GetFileType(h) != FILE_TYPE_DISK)
                st = pi_error_set(err, PI_ERR_IO, "'%s' is %s: it would be replaced by a "
                                  "regular file; write to a file name instead", path,
                                  kind_of_handle(h));
            CloseHandle(h);
        }
    }
    free(w);
    return st;
}

int pi_os_create_temp(const char *path, char *tmp, size_t cap, FILE **out,
                      struct pi_error *err) {
    REASON_BUF;
    *out = NULL;
    PI_TRY(pi_os_check_replaceable(path, err));
    for (int n = 0; n < 100; n++) {
        if ((size_t)snprintf(tmp, cap, "%s.tmp%d", path, n) >= cap)
            PI_FAIL(err, PI_ERR_IO, "path too long: '%s'", path);
        wchar_t *w = wide(tmp);
        if (!w)
            PI_FAIL(err, PI_ERR_IO, "cannot create '%s': %s", tmp, REASON(GetLastError()));
        /* CREATE_NEW: an existing name, a symbolic link included, fails with
         * ERROR_FILE_EXISTS instead of being opened */
        HANDLE h = CreateFileW(w, GENERIC_WRITE, FILE_SHARE_READ | FILE_SHARE_DELETE, NULL,
                               CREATE_NEW, FILE_ATTRIBUTE_NORMAL, NULL);
        DWORD e = GetLastError();
        free(w);
        if (h == INVALID_HANDLE_VALUE) {
            if (e == ERROR_FILE_EXISTS || e == ERROR_ALREADY_EXISTS)
                continue;
            PI_FAIL(err, PI_ERR_IO, "cannot create '%s': %s", tmp, REASON(e));
        }
        int fd = _open_osfhandle((intptr_t)h, _O_WRONLY | _O_BINARY);
        if (fd < 0) {
            CloseHandle(h);
            pi_os_remove(tmp);
            PI_FAIL(err, PI_ERR_IO, "cannot open '%s': %s", tmp, strerror(errno));
        }
        FILE *fp = _fdopen(fd, "wb");
        if (!fp) {
            const int en = errno;
            _close(fd); /* closes h */
            pi_os_remove(tmp);
            PI_FAIL(err, PI_ERR_IO, "cannot open '%s': %s", tmp, strerror(en));
        }
        *out = fp;
        return PI_OK;
    }
    PI_FAIL(err, PI_ERR_IO, "cannot create a temporary file next to '%s': %s.tmp0..99 all "
            "exist", path, path);
}

FILE *pi_os_fopen(const char *path, const char *mode) {
    wchar_t *w = wide(path);
    if (!w) {
        errno = errno_of(GetLastError());
        return NULL;
    }
    wchar_t wm[16];
    size_t i = 0;
    for (; mode[i] && i < sizeof wm / sizeof *wm - 1; i++)
        wm[i] = (wchar_t)(unsigned char)mode[i];
    wm[i] = 0;
    FILE *fp = _wfopen(w, wm);
    free(w);
    return fp;
}

int pi_os_remove(const char *path) {
    wchar_t *w = wide(path);
    if (!w) {
        errno = errno_of(GetLastError());
        return -1;
    }
    BOOL ok = DeleteFileW(w);
    DWORD e = GetLastError();
    free(w);
    if (!ok) {
        errno = errno_of(e);
        return -1;
    }
    return 0;
}

int pi_os_replace(const char *from, const char *to, struct pi_error *err) {
    REASON_BUF;
    wchar_t *wf = wide(from), *wt = wide(to);
    DWORD e = GetLastError();
    BOOL ok = wf && wt && MoveFileExW(wf, wt, MOVEFILE_REPLACE_EXISTING | MOVEFILE_WRITE_THROUGH);
    if (wf && wt && !ok)
        e = GetLastError();
    free(wf);
    free(wt);
    if (!ok)
        PI_FAIL(err, PI_ERR_IO, "cannot rename '%s' to '%s': %s", from, to, REASON(e));
    return PI_OK;
}

int pi_os_sync_close(FILE *fp, const char *path, struct pi_error *err) {
    REASON_BUF;
    const char *why = NULL;
    errno = 0;
    if (fflush(fp) != 0) {
        why = strerror(errno);
    } else {
        HANDLE h = (HANDLE)_get_osfhandle(_fileno(fp));
        if (h == INVALID_HANDLE_VALUE || !FlushFileBuffers(h))
            why = REASON(GetLastError());
    }
    if (fclose(fp) != 0 && !why)
        why = strerror(errno);
    if (why)
        PI_FAIL(err, PI_ERR_IO, "cannot write '%s': %s", path, why);
    return PI_OK;
}

/* The volume serial number and file index of `path`, 0 when it cannot be opened. */
static int file_id(const char *path, BY_HANDLE_FILE_INFORMATION *info) {
    wchar_t *w = wide(path);
    if (!w)
        return 0;
    HANDLE h = CreateFileW(w, 0, FILE_SHARE_READ | FILE_SHARE_WRITE | FILE_SHARE_DELETE, NULL,
                           OPEN_EXISTING, FILE_FLAG_BACKUP_SEMANTICS, NULL);
    free(w);
    if (h == INVALID_HANDLE_VALUE)
        return 0;
    int ok = GetFileInformationByHandle(h, info) != 0;
    CloseHandle(h);
    return ok;
}

int pi_os_same_file(const char *a, const char *b) {
    BY_HANDLE_FILE_INFORMATION ia, ib;
    return file_id(a, &ia) && file_id(b, &ib) &&
           ia.dwVolumeSerialNumber == ib.dwVolumeSerialNumber &&
           ia.nFileIndexHigh == ib.nFileIndexHigh && ia.nFileIndexLow == ib.nFileIndexLow;
}

/* ---- Threads -------------------------------------------------------------------- */

struct pi_thread {
    HANDLE h;
    void (*fn)(void *);
    void *arg;
};

static unsigned __stdcall thread_main(void *p) {
    struct pi_thread *t = p;
    t->fn(t->arg);
    return 0;
}

int pi_os_thread_start(struct pi_thread **out, const struct pi_allocator *a,
                       void (*fn)(void *arg), void *arg) {
    *out = NULL;
    struct pi_thread *t = pi_calloc(a, 1, sizeof *t);
    if (!t)
        return PI_ERR_NOMEM;
    t->fn = fn;
    t->arg = arg;
    /* _beginthreadex, not CreateThread: the C runtime's per-thread state is set up */
    uintptr_t h = _beginthreadex(NULL, 0, thread_main, t, 0, NULL);
    if (h == 0) {
        pi_free(a, t);
        return PI_ERR_INTERNAL;
    }
    t->h = (HANDLE)h;
    *out = t;
    return PI_OK;
}

void pi_os_thread_join(struct pi_thread *t, const struct pi_allocator *a) {
    if (!t)
        return;
    WaitForSingleObject(t->h, INFINITE);
    CloseHandle(t->h);
    pi_free(a, t);
}

struct pi_waiter {
    SRWLOCK mu;
    CONDITION_VARIABLE cv;
};

int pi_os_waiter_create(struct pi_waiter **out, const struct pi_allocator *a) {
    *out = NULL;
    struct pi_waiter *w = pi_calloc(a, 1, sizeof *w);
    if (!w)
        return PI_ERR_NOMEM;
    InitializeSRWLock(&w->mu);
    InitializeConditionVariable(&w->cv);
    *out = w;
    return PI_OK;
}

void pi_os_waiter_destroy(struct pi_waiter *w, const struct pi_allocator *a) {
    if (w)
        pi_free(a, w); /* SRW locks and condition variables need no destruction */
}

void pi_os_waiter_lock(struct pi_waiter *w) {
    AcquireSRWLockExclusive(&w->mu);
}

void pi_os_waiter_unlock(struct pi_waiter *w) {
    ReleaseSRWLockExclusive(&w->mu);
}

void pi_os_waiter_wait(struct pi_waiter *w) {
    SleepConditionVariableSRW(&w->cv, &w->mu, INFINITE, 0);
}

void pi_os_waiter_broadcast(struct pi_waiter *w) {
    WakeAllConditionVariable(&w->cv);
}

int pi_os_n_cpus(void) {
    /* all processor groups (more than 64 logical processors), not only the caller's */
    DWORD n = GetActiveProcessorCount(ALL_PROCESSOR_GROUPS);
    if (n == 0) {
        SYSTEM_INFO si;
        GetSystemInfo(&si);
        n = si.dwNumberOfProcessors;
    }
    return n > 0 ? (int)n : 1;
}

uint64_t pi_os_time_ns(void) {
    static LARGE_INTEGER freq; /* constant after boot; a racing first write is the same */
    if (freq.QuadPart == 0)
        QueryPerformanceFrequency(&freq);
    LARGE_INTEGER now;
    QueryPerformanceCounter(&now);
    const uint64_t f = (uint64_t)freq.QuadPart, c = (uint64_t)now.QuadPart;
    /* split to avoid overflowing c * 1e9 */
    return c / f * 1000000000u + c % f * 1000000000u / f;
}

void pi_os_cpu_relax(void) {
    YieldProcessor();
}

void pi_os_yield(void) {
    SwitchToThread();
}
