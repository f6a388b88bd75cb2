#define _POSIX_C_SOURCE 200809L
/* Files the library writes (state, activation statistics, GPU index) go to a new
 * temporary beside the target, created exclusively, then renamed: a symbolic link
 * planted at the temporary's name is never written through (the file it points to
 * stays as it was) and a FIFO there is never waited on; the target ends up a regular
 * file that loads again. Before, state and statistics were written through
 * fopen("<path>.tmp", "wb").
 * Windows (no FIFOs, symbolic links for privileged users only): regular files planted
 * at the temporaries' names stay as they were, and NUL stands for the device. */
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>

#include "powerinfer.h"
#include "testmodel.h"
#include "portable.h" /* last: Windows shims of mkdir, mkdtemp */

static char g_dir[256];

/* `name` in the test's directory, in a buffer of its own. */
static const char *in_dir(const char *name) {
    static char p[32][400];
    static int k;
    assert_true(k < 32);
    snprintf(p[k], sizeof p[k], "%s/%s", g_dir, name);
    return p[k++];
}

static void write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    assert_int_equal(fputs(text, f) >= 0, 1);
    assert_int_equal(fclose(f), 0);
}

static void assert_text(const char *path, const char *text) {
    char buf[64] = "";
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    assert_string_equal(buf, text);
}

/* Plant links to a victim file at the old temporary name (<target>.tmp) and the first
 * new one (.tmp0), and a FIFO at the second; the victim must survive the save. */
static void plant(const char *target) {
    char t[400], t0[400], t1[400];
    snprintf(t, sizeof t, "%s.tmp", target);
    snprintf(t0, sizeof t0, "%s.tmp0", target);
    snprintf(t1, sizeof t1, "%s.tmp1", target);
    write_text(in_dir("victim"), "precious");
    unlink(t);
    unlink(t0);
    unlink(t1);
#ifdef _WIN32
    write_text(t0, "precious");
    write_text(t1, "precious");
#else
    assert_int_equal(symlink(in_dir("victim"), t), 0);
    assert_int_equal(symlink(in_dir("victim"), t0), 0);
    assert_int_equal(mkfifo(t1, 0600), 0);
#endif
}

static void check_after(const char *target) {
    assert_text(in_dir("victim"), "precious");
    struct stat st;
#ifdef _WIN32
    char t[400];
    snprintf(t, sizeof t, "%s.tmp0", target);
    assert_text(t, "precious");
    snprintf(t, sizeof t, "%s.tmp1", target);
    assert_text(t, "precious");
    assert_int_equal(stat(target, &st), 0);
#else
    assert_int_equal(lstat(target, &st), 0);
#endif
    assert_true(S_ISREG(st.st_mode));
}

#ifndef _WIN32
static void on_alarm(int sig) {
    (void)sig;
    static const char msg[] = "a save blocked on a FIFO\n";
    if (write(2, msg, sizeof msg - 1) < 0)
        _exit(3);
    _exit(2);
}
#endif

static void test_saves_do_not_follow_links(void **state) {
    (void)state;
    struct tm_spec s;
    tm_default(&s);
    s.sparse = 1;
    const char *mpath = in_dir("m.gguf");
    assert_int_equal(tm_write(&s, mpath), PI_OK);
    pi_model *m;
    assert_int_equal(pi_model_open(mpath, NULL, &m), PI_OK);
    pi_ctx_params cp;
    pi_ctx_default_params(&cp);
    cp.n_ctx = 16;
    cp.n_threads = 1;
    cp.stats = PI_STATS_ON;
    pi_ctx *c;
    assert_int_equal(pi_ctx_create(m, &cp, &c), PI_OK);
    const int32_t toks[] = {1, 2, 3};
    assert_int_equal(pi_ctx_decode(c, toks, 3), PI_OK);

    /* state */
    const char *sp = in_dir("state.bin");
    plant(sp);
    assert_int_equal(pi_ctx_state_save_file(c, -1, sp), PI_OK);
    check_after(sp);
    if (pi_ctx_state_load_file(c, -1, sp) != PI_OK)
        fail_msg("state load: %s", pi_ctx_errmsg(c));

    /* activation statistics */
    const char *stp = in_dir("stats.gguf");
    plant(stp);
    char err[256] = "";
    assert_int_equal(pi_stats_save(pi_ctx_stats(c), stp, err, sizeof err), PI_OK);
    check_after(stp);
    pi_stats *loaded;
    assert_int_equal(pi_stats_load(stp, &loaded, err, sizeof err), PI_OK);
    pi_stats_free(loaded);

    /* GPU index */
    pi_ctx_params pp;
    pi_ctx_default_params(&pp);
    pp.n_ctx = 16;
    pp.device = PI_DEVICE_CPU;
    pi_plan *plan;
    assert_int_equal(pi_model_plan(m, &pp, &plan), PI_OK);
    const char *gp = in_dir("m.gpuidx");
    plant(gp);
    assert_int_equal(pi_plan_save(plan, gp), PI_OK);
    check_after(gp);
    pi_plan_free(plan);

    /* a FIFO or a device as the target is refused, and stays what it was: a rename
     * over it would replace it (as root, pi-quantize to /dev/null destroyed it) */
#ifdef _WIN32
    const char *fifo = "NUL", *fifo_kind = "is a device";
#else
    const char *fifo = in_dir("target.fifo"), *fifo_kind = "is a FIFO";
    assert_int_equal(mkfifo(fifo, 0600), 0);
#endif
    assert_int_equal(pi_ctx_state_save_file(c, -1, fifo), PI_ERR_IO);
    assert_non_null(strstr(pi_ctx_errmsg(c), fifo_kind));
    assert_int_equal(pi_stats_save(pi_ctx_stats(c), fifo, err, sizeof err), PI_ERR_IO);
    assert_int_equal(pi_model_plan(m, &pp, &plan), PI_OK);
    assert_int_equal(pi_plan_save(plan, fifo), PI_ERR_IO);
    pi_plan_free(plan);
    pi_quantize_params qp;
    pi_quantize_default_params(&qp);
    qp.errbuf = err;
    qp.errbuf_cap = sizeof err;
    assert_int_equal(pi_model_quantize(mpath, fifo, &qp), PI_ERR_IO);
    assert_non_null(strstr(err, fifo_kind));
    assert_int_equal(pi_model_quantize(mpath, g_dir, &qp), PI_ERR_IO); /* a directory */
#ifndef _WIN32
    struct stat st;
    assert_int_equal(lstat(fifo, &st), 0);
    assert_true(S_ISFIFO(st.st_mode));
    /* a symbolic link as the target: the link is replaced, not what it points to */
    const char *lnk = in_dir("link.bin");
    write_text(in_dir("victim"), "precious");
    assert_int_equal(symlink(in_dir("victim"), lnk), 0);
    assert_int_equal(pi_ctx_state_save_file(c, -1, lnk), PI_OK);
    assert_text(in_dir("victim"), "precious");
    assert_int_equal(lstat(lnk, &st), 0);
    assert_true(S_ISREG(st.st_mode));
#endif

    pi_ctx_destroy(c);
    pi_model_close(m);
}

int main(void) {
    snprintf(g_dir, sizeof g_dir, "/tmp/pi_save_XXXXXX");
    if (!mkdtemp(g_dir))
        return 1;
#ifndef _WIN32
    signal(SIGALRM, on_alarm);
    alarm(60);
#endif
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_saves_do_not_follow_links),
    };
    const int r = cmocka_run_group_tests(tests, NULL, NULL);
    char cmd[300];
#ifdef _WIN32
    for (char *q = g_dir; *q; q++)
        if (*q == '/')
            *q = '\\';
    snprintf(cmd, sizeof cmd, "rmdir /s /q \"%s\"", g_dir);
#else
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
#endif
    if (system(cmd) != 0)
        return 1;
    return r;
}
