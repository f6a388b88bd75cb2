#define _POSIX_C_SOURCE 200809L
/* How model and state files reach memory (pi_model_params.load_mode, lock_memory):
 *  - PI_LOAD_READ copies the file: truncating it and writing another model over it in
 *    place after the open change nothing, the logits stay those of a fresh mmap open;
 *    with PI_LOAD_MMAP the same in-place write changes the logits and a truncation
 *    kills the process with SIGBUS, as the header says;
 *  - the copy is page-aligned as a mapping is; its allocation failing is PI_ERR_NOMEM
 *    with nothing left allocated, as is every other allocation failing; progress is
 *    reported (monotone) during the read and an abort there is clean;
 *  - lock_memory locks the bytes, or (locked-memory limit 0, unprivileged) warns
 *    through the log callback and opens anyway;
 *  - a FIFO, a directory or a device is refused with PI_ERR_IO at once (an alarm turns
 *    a blocking open into a failure), as a model and as a state file; a state file
 *    larger than any state of the context is PI_ERR_FORMAT before it is read.
 * argv[1]: a work directory (created).
 * Windows: the same but for what needs fork, rlimits or FIFOs, each marked _WIN32
 * below (a mapped file cannot be truncated there, NUL stands for the device). */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>
#ifdef _WIN32
#  define WIN32_LEAN_AND_MEAN
#  include <windows.h>
#else
#  include <sys/resource.h>
#  include <sys/wait.h>
#endif
#include <cmocka.h>

#include "failalloc.h"

/* AddressSanitizer intercepts mlock and munlock and does nothing (VmLck stays 0, and a
 * locked-memory limit of 0 cannot make them fail), so under it the lock test checks
 * only that lock_memory opens and decodes. */
#if defined(__SANITIZE_ADDRESS__)
#  define MLOCK_IS_REAL 0
#elif defined(__has_feature)
#  if __has_feature(address_sanitizer)
#    define MLOCK_IS_REAL 0
#  endif
#endif
#ifndef MLOCK_IS_REAL
#  define MLOCK_IS_REAL 1
#endif
#include "model/model.h"
#include "powerinfer.h"
#include "testmodel.h"
#include "portable.h" /* last: Windows shims of mkdir, mkdtemp */

enum { NTOK = 5, MAXV = 64 };
static const int32_t TOKS[NTOK] = {1, 7, 3, 30, 12};
static char g_dir[256];

static const char *path_of(const char *name) {
    static char p[4][320];
    static int i;
    i = (i + 1) % 4;
    snprintf(p[i], sizeof p[i], "%s/%s", g_dir, name);
    return p[i];
}

static void write_model(const char *path, int sparse, uint32_t wtype, uint32_t seed) {
    struct tm_spec s;
    tm_default(&s);
    s.sparse = sparse;
    s.wtype = wtype;
    s.seed = seed;
    assert_int_equal(tm_write(&s, path), PI_OK);
}

static int open_mode(const char *path, int32_t mode, int32_t lock, pi_model **m, char *msg,
                     size_t cap) {
    pi_model_params p;
    pi_model_default_params(&p);
    p.load_mode = mode;
    p.lock_memory = lock;
    p.errbuf = msg;
    p.errbuf_cap = cap;
    return pi_model_open(path, &p, m);
}

static pi_model *must_open(const char *path, int32_t mode) {
    char msg[512] = "";
    pi_model *m = NULL;
    if (open_mode(path, mode, 0, &m, msg, sizeof msg) != PI_OK)
        fail_msg("%s: %s", path, msg);
    return m;
}

/* The logits after decoding TOKS, into out[MAXV]; returns n_vocab. */
static int64_t decode_logits(const pi_model *m, float *out) {
    pi_ctx_params cp;
    pi_ctx_default_params(&cp);
    cp.n_ctx = 16;
    cp.n_threads = 2;
    pi_ctx *c;
    assert_int_equal(pi_ctx_create(m, &cp, &c), PI_OK);
    assert_int_equal(pi_ctx_decode(c, TOKS, NTOK), PI_OK);
    const int64_t V = pi_model_n_vocab(m);
    assert_true(V > 0 && V <= MAXV);
    memcpy(out, pi_ctx_logits(c), (size_t)V * sizeof(float));
    pi_ctx_destroy(c);
    return V;
}

/* Overwrite `path` in place (same inode, no truncation) with the bytes of `src`. */
static void overwrite_in_place(const char *path, const char *src) {
    FILE *in = fopen(src, "rb");
    assert_non_null(in);
    FILE *out = fopen(path, "r+b"); /* neither truncated nor recreated */
    assert_non_null(out);
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, in)) > 0)
        assert_int_equal(fwrite(buf, 1, n, out), n);
    assert_int_equal(fclose(out), 0);
    fclose(in);
}

static size_t page_size(void) {
#ifdef _WIN32
    SYSTEM_INFO si;
    GetSystemInfo(&si);
    return si.dwPageSize;
#else
    return (size_t)sysconf(_SC_PAGESIZE);
#endif
}

/* truncate(2); Windows: SetEndOfFile (an extension reads as zeros, as on POSIX) */
static int set_size(const char *path, long long size) {
#ifdef _WIN32
    HANDLE h = CreateFileA(path, GENERIC_WRITE, FILE_SHARE_READ | FILE_SHARE_WRITE, NULL,
                           OPEN_EXISTING, FILE_ATTRIBUTE_NORMAL, NULL);
    if (h == INVALID_HANDLE_VALUE)
        return -1;
    LARGE_INTEGER at;
    at.QuadPart = size;
    int ok = SetFilePointerEx(h, at, NULL, FILE_BEGIN) && SetEndOfFile(h);
    CloseHandle(h);
    return ok ? 0 : -1;
#else
    return truncate(path, (off_t)size);
#endif
}

static void test_read_survives_changes(void **state) {
    (void)state;
    for (int sparse = 0; sparse <= 1; sparse++) {
        const char *ref = path_of("ref.gguf"), *live = path_of("live.gguf");
        const char *other = path_of("other.gguf");
        write_model(ref, sparse, PI_TYPE_Q8_0, 11);
        write_model(live, sparse, PI_TYPE_Q8_0, 11);
        write_model(other, sparse, PI_TYPE_Q8_0, 12); /* same size, other weights */
        float want[MAXV], got[MAXV], changed[MAXV];
        pi_model *r = must_open(ref, PI_LOAD_MMAP);
        const int64_t V = decode_logits(r, want);

        pi_model *m = must_open(live, PI_LOAD_READ);
        assert_non_null(m->map.heap); /* a copy, not a mapping */
        assert_int_equal((uintptr_t)m->map.data % (uintptr_t)page_size(), 0);
        assert_int_equal(set_size(live, 0), 0);
        decode_logits(m, got);
        assert_memory_equal(got, want, (size_t)V * sizeof(float));
        overwrite_in_place(live, other);
        decode_logits(m, got);
        assert_memory_equal(got, want, (size_t)V * sizeof(float));
        pi_model_close(m);

        /* the same in-place write under a mapping: the model computes with it */
        pi_model *o = must_open(other, PI_LOAD_MMAP);
        decode_logits(o, changed);
        pi_model_close(o);
        assert_memory_not_equal(changed, want, (size_t)V * sizeof(float));
        write_model(live, sparse, PI_TYPE_Q8_0, 11);
        pi_model *mm = must_open(live, PI_LOAD_MMAP);
        overwrite_in_place(live, other);
        decode_logits(mm, got);
        assert_memory_equal(got, changed, (size_t)V * sizeof(float));
        pi_model_close(mm);
        pi_model_close(r);
    }
}

#ifdef _WIN32
/* Windows refuses to truncate a file while a view of it is mapped (ERROR_USER_MAPPED_FILE):
 * the model goes on computing the same logits. */
static void test_mmap_truncation_faults(void **state) {
    (void)state;
    const char *live = path_of("trunc.gguf");
    write_model(live, 0, PI_TYPE_F32, 3);
    float want[MAXV], got[MAXV];
    pi_model *m = must_open(live, PI_LOAD_MMAP);
    const int64_t V = decode_logits(m, want);
    assert_int_equal(set_size(live, 0), -1);
    decode_logits(m, got);
    assert_memory_equal(got, want, (size_t)V * sizeof(float));
    pi_model_close(m);
    assert_int_equal(set_size(live, 0), 0); /* unmapped: allowed again */
}
#else
/* A truncated mapped file: the process dies of SIGBUS at the next access (under a
 * sanitizer it reports the signal and exits non-zero instead). */
static void test_mmap_truncation_faults(void **state) {
    (void)state;
    const char *live = path_of("trunc.gguf");
    write_model(live, 0, PI_TYPE_F32, 3);
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        signal(SIGBUS, SIG_DFL); /* cmocka's handler would go on with the next tests */
        pi_model *m = NULL;
        if (pi_model_open(live, NULL, &m) != PI_OK)
            _exit(3);
        if (truncate(live, 0) != 0)
            _exit(4);
        float out[MAXV];
        pi_ctx *c;
        if (pi_ctx_create(m, NULL, &c) == PI_OK && pi_ctx_decode(c, TOKS, NTOK) == PI_OK)
            memcpy(out, pi_ctx_logits(c), sizeof(float));
        _exit(0); /* survived: the header's warning would be wrong */
    }
    int ws;
    assert_int_equal(waitpid(pid, &ws, 0), pid);
    if (WIFSIGNALED(ws))
        assert_int_equal(WTERMSIG(ws), SIGBUS);
    else
        assert_true(WEXITSTATUS(ws) != 0 && WEXITSTATUS(ws) != 3 && WEXITSTATUS(ws) != 4);
}
#endif

/* Fails every allocation of at least `min` bytes. */
struct bigfail {
    size_t min;
    long failed, live;
};

static void *bigfail_alloc(void *user, size_t size) {
    struct bigfail *b = user;
    if (size >= b->min) {
        b->failed++;
        return NULL;
    }
    void *p = malloc(size);
    b->live += p != NULL;
    return p;
}

static void bigfail_free(void *user, void *p) {
    struct bigfail *b = user;
    b->live -= p != NULL;
    free(p);
}

static void test_read_allocation_failure(void **state) {
    (void)state;
    const char *path = path_of("alloc.gguf");
    write_model(path, 1, PI_TYPE_F16, 5);
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    pi_model_params p;
    pi_model_default_params(&p);
    p.load_mode = PI_LOAD_READ;
    char msg[512] = "";
    p.errbuf = msg;
    p.errbuf_cap = sizeof msg;
    /* the copy itself */
    struct bigfail b = {(size_t)st.st_size, 0, 0};
    struct pi_allocator a = {bigfail_alloc, bigfail_free, &b};
    pi_model *m = (pi_model *)1;
    assert_int_equal(pi_model_open_with(path, &p, &a, &m), PI_ERR_NOMEM);
    assert_null(m);
    assert_int_equal(b.failed, 1);
    assert_int_equal(b.live, 0);
    assert_non_null(strstr(msg, "out of memory for a copy of the file"));
    /* and every allocation in turn */
    struct failalloc fa;
    long n;
    for (n = 1; n < 100000; n++) {
        a = failalloc_make(&fa, n);
        int s = pi_model_open_with(path, &p, &a, &m);
        if (s == PI_OK) {
            assert_true(m->map.heap != NULL);
            pi_model_close(m);
            assert_int_equal(fa.live, 0);
            break;
        }
        assert_int_equal(s, PI_ERR_NOMEM);
        assert_null(m);
        assert_int_equal(fa.live, 0);
    }
    assert_true(n > 3);
}

struct prog {
    int calls, stop_at, monotone;
    float last;
};

static int on_progress(void *user, float f) {
    struct prog *p = user;
    if (f < p->last)
        p->monotone = 0;
    p->last = f;
    return ++p->calls == p->stop_at;
}

static void test_read_progress_and_abort(void **state) {
    (void)state;
    const char *path = path_of("prog.gguf");
    write_model(path, 0, PI_TYPE_F32, 6);
    pi_model_params p;
    pi_model_default_params(&p);
    p.load_mode = PI_LOAD_READ;
    p.progress_fn = on_progress;
    struct prog all = {0, 0, 1, 0.0f};
    p.progress_user = &all;
    pi_model *m;
    assert_int_equal(pi_model_open(path, &p, &m), PI_OK);
    pi_model_close(m);
    assert_true(all.monotone);
    assert_true(all.last == 1.0f);
    pi_model_default_params(&p);
    p.progress_fn = on_progress;
    struct prog mapped = {0, 0, 1, 0.0f};
    p.progress_user = &mapped;
    assert_int_equal(pi_model_open(path, &p, &m), PI_OK);
    pi_model_close(m);
    assert_int_equal(all.calls, mapped.calls + 1); /* one 64 MiB chunk read */
    p.load_mode = PI_LOAD_READ;
    for (int k = 1; k <= all.calls; k++) {
        struct prog q = {0, k, 1, 0.0f};
        struct failalloc fa;
        struct pi_allocator a = failalloc_make(&fa, 0);
        char msg[256] = "";
        p.progress_user = &q;
        p.errbuf = msg;
        p.errbuf_cap = sizeof msg;
        assert_int_equal(pi_model_open_with(path, &p, &a, &m), PI_ERR_ABORTED);
        assert_null(m);
        assert_int_equal(fa.live, 0);
        assert_non_null(strstr(msg, "aborted"));
    }
}

struct logs {
    int warnings;
    char last[512];
};

static void on_log(void *user, int level, const char *msg) {
    struct logs *l = user;
    if (level == PI_LOG_WARN) {
        l->warnings++;
        snprintf(l->last, sizeof l->last, "%s", msg);
    }
}

/* kB of locked memory of this process (VmLck), or -1 without /proc. */
static long vm_locked_kb(void) {
#ifdef _WIN32
    return -1; /* under wine, /proc/self/status would be wine's own */
#endif
    FILE *fp = fopen("/proc/self/status", "r");
    if (!fp)
        return -1;
    char line[256];
    long kb = -1;
    while (fgets(line, sizeof line, fp))
        if (sscanf(line, "VmLck: %ld", &kb) == 1)
            break;
    fclose(fp);
    return kb;
}

/* Open `path` with lock_memory and load_mode; 0 when the outcome is consistent:
 * locked with no warning (and VmLck covering the file), or unlocked with one warning
 * naming the failure. *locked tells which. */
static int lock_outcome(const char *path, int32_t mode, int *locked) {
    struct logs l = {0, ""};
    pi_model_params p;
    pi_model_default_params(&p);
    p.load_mode = mode;
    p.lock_memory = 1;
    p.log_fn = on_log;
    p.log_user = &l;
    pi_model *m;
    const long before = vm_locked_kb();
    if (pi_model_open(path, &p, &m) != PI_OK)
        return 1;
    *locked = m->map.locked;
    int bad = 0;
    if (m->map.locked) {
        bad |= l.warnings != 0;
        if (before >= 0 && MLOCK_IS_REAL)
            bad |= vm_locked_kb() - before < (long)(m->map.size / 1024);
    } else {
        bad |= l.warnings != 1 || !strstr(l.last, "cannot lock");
    }
    float out[MAXV];
    pi_ctx *c;
    bad |= pi_ctx_create(m, NULL, &c) != PI_OK;
    if (!bad) {
        bad |= pi_ctx_decode(c, TOKS, NTOK) != PI_OK;
        memcpy(out, pi_ctx_logits(c), sizeof(float));
        pi_ctx_destroy(c);
    }
    pi_model_close(m);
    if (before >= 0 && vm_locked_kb() != before)
        bad = 1; /* close unlocks */
    return bad;
}

static void test_lock_memory(void **state) {
    (void)state;
    /* in a directory of /tmp, which the unprivileged child below can read whatever the
     * permissions of the build tree */
    char dir[] = "/tmp/pi_test_load_XXXXXX", path[64];
    assert_non_null(mkdtemp(dir));
#ifndef _WIN32
    assert_int_equal(chmod(dir, 0755), 0);
#endif
    snprintf(path, sizeof path, "%s/lock.gguf", dir);
    write_model(path, 0, PI_TYPE_F32, 7);
#ifndef _WIN32
    assert_int_equal(chmod(path, 0644), 0);
#endif
    if (!MLOCK_IS_REAL)
        print_message("# AddressSanitizer ignores mlock: VmLck and the locked-memory "
                      "limit are not checked in this build\n");
    for (int32_t mode = PI_LOAD_MMAP; mode <= PI_LOAD_READ; mode++) {
        int locked = -1;
        assert_int_equal(lock_outcome(path, mode, &locked), 0);
        if (!MLOCK_IS_REAL)
            continue;
#ifndef _WIN32 /* no fork and no locked-memory limit to lower there */
        /* no locked memory allowed (and no privilege to exceed it): a warning only */
        fflush(NULL);
        pid_t pid = fork();
        assert_true(pid >= 0);
        if (pid == 0) {
            struct rlimit rl = {0, 0};
            if (setrlimit(RLIMIT_MEMLOCK, &rl) != 0)
                _exit(10);
            if (geteuid() == 0 && (setgid(65534) != 0 || setuid(65534) != 0))
                _exit(11);
            int lk = -1;
            int bad = lock_outcome(path, mode, &lk);
            _exit(bad ? 12 : lk ? 13 : 0);
        }
        int ws;
        assert_int_equal(waitpid(pid, &ws, 0), pid);
        assert_true(WIFEXITED(ws));
        assert_int_equal(WEXITSTATUS(ws), 0);
#endif
    }
    remove(path);
    rmdir(dir);
}

#ifndef _WIN32
static void on_alarm(int sig) {
    (void)sig;
    static const char msg[] = "test_load_modes: an open blocked (FIFO?)\n";
    (void)!write(2, msg, sizeof msg - 1);
    _exit(1);
}
#endif

/* FIFO, directory, device: PI_ERR_IO naming what it is, without waiting. */
static void test_not_regular(void **state) {
    (void)state;
    const char *dir = path_of("adir");
    mkdir(dir, 0700);
#ifdef _WIN32 /* no FIFOs in the file system; NUL is the device */
    enum { NP = 2 };
    const char *paths[NP] = {dir, "NUL"};
    const char *kinds[NP] = {"a directory", "a device"};
#else
    enum { NP = 3 };
    const char *fifo = path_of("fifo");
    remove(fifo);
    assert_int_equal(mkfifo(fifo, 0600), 0);
    const char *paths[NP] = {fifo, dir, "/dev/zero"};
    const char *kinds[NP] = {"a FIFO", "a directory", "a device"};
    signal(SIGALRM, on_alarm);
    alarm(20);
#endif
    for (int i = 0; i < NP; i++) {
        for (int32_t mode = PI_LOAD_MMAP; mode <= PI_LOAD_READ; mode++) {
            char msg[512] = "";
            pi_model *m = (pi_model *)1;
            assert_int_equal(open_mode(paths[i], mode, 0, &m, msg, sizeof msg), PI_ERR_IO);
            assert_null(m);
            if (!strstr(msg, kinds[i]) || !strstr(msg, "not a regular file"))
                fail_msg("%s: '%s'", paths[i], msg);
        }
    }
    /* as a state file */
    const char *mp = path_of("state_model.gguf");
    write_model(mp, 0, PI_TYPE_F32, 8);
    pi_model *m = must_open(mp, PI_LOAD_MMAP);
    pi_ctx_params cp;
    pi_ctx_default_params(&cp);
    cp.n_ctx = 16;
    pi_ctx *c;
    assert_int_equal(pi_ctx_create(m, &cp, &c), PI_OK);
    assert_int_equal(pi_ctx_decode(c, TOKS, NTOK), PI_OK);
    for (int i = 0; i < NP; i++) {
        assert_int_equal(pi_ctx_state_load_file(c, -1, paths[i]), PI_ERR_IO);
        if (!strstr(pi_ctx_errmsg(c), kinds[i]))
            fail_msg("%s: '%s'", paths[i], pi_ctx_errmsg(c));
        assert_int_equal(pi_ctx_pos(c), NTOK);
    }
#ifndef _WIN32
    alarm(0);
#endif
    /* a directory as the target of a save: refused, nothing left behind */
    assert_int_equal(pi_ctx_state_save_file(c, -1, dir), PI_ERR_IO);
    struct stat st;
    assert_int_equal(stat(path_of("adir.tmp"), &st), -1);
    /* a file larger than any state of this context: refused before it is read */
    const char *sp = path_of("ok.state"), *big = path_of("big.state");
    assert_int_equal(pi_ctx_state_save_file(c, -1, sp), PI_OK);
    FILE *fp = fopen(big, "wb");
    assert_non_null(fp);
    assert_int_equal(fclose(fp), 0);
    assert_int_equal(set_size(big, 1ll << 30), 0); /* sparse: 1 GiB of zeros */
    assert_int_equal(pi_ctx_state_load_file(c, -1, big), PI_ERR_FORMAT);
    assert_non_null(strstr(pi_ctx_errmsg(c), "at most"));
    assert_int_equal(pi_ctx_state_load_file(c, -1, sp), PI_OK);
    assert_int_equal(pi_ctx_pos(c), NTOK);
    remove(big);
    remove(sp);
    pi_ctx_destroy(c);
    pi_model_close(m);
#ifndef _WIN32
    remove(fifo);
#endif
    rmdir(dir);
}

static void test_bad_load_mode(void **state) {
    (void)state;
    const char *path = path_of("mode.gguf");
    write_model(path, 0, PI_TYPE_F32, 9);
    char msg[512] = "";
    pi_model *m = (pi_model *)1;
    assert_int_equal(open_mode(path, 2, 0, &m, msg, sizeof msg), PI_ERR_INVALID_ARG);
    assert_null(m);
    assert_non_null(strstr(msg, "load_mode"));
    assert_int_equal(open_mode(path, -1, 0, &m, msg, sizeof msg), PI_ERR_INVALID_ARG);
}

int main(int argc, char **argv) {
    if (argc < 2)
        return 99;
    snprintf(g_dir, sizeof g_dir, "%s", argv[1]);
    mkdir(g_dir, 0755);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_read_survives_changes),
        cmocka_unit_test(test_mmap_truncation_faults),
        cmocka_unit_test(test_read_allocation_failure),
        cmocka_unit_test(test_read_progress_and_abort),
        cmocka_unit_test(test_lock_memory),
        cmocka_unit_test(test_not_regular),
        cmocka_unit_test(test_bad_load_mode),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
