/* test_corpus.c -- open every file of the GGUF corpus (tests/corpus, made by
 * make_corpus.py) through the public API and check the verdict:
 *
 *   valid/        PI_OK with metadata_only = 1; model_*.gguf also PI_OK in a full open,
 *                 and two tokens decode to finite logits
 *   malformed/    PI_ERR_FORMAT, *out == NULL, a non-empty error message
 *   unsupported/  PI_ERR_UNSUPPORTED, *out == NULL, a non-empty error message, in a full
 *                 open (model_*.gguf are models this build refuses to run)
 *   refused/      PI_ERR_FORMAT in a full open (values the model description checks)
 *
 * Usage: test_corpus CORPUS_ROOT (the directory that holds the four folders).
 * Every file is checked even after a failure; each test fails at its end if any file
 * was wrong, and the failing files are named in the output. */
#define _POSIX_C_SOURCE 200809L

#include <dirent.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "powerinfer.h"

static const char *corpus_root;

struct name_list {
    char **names;
    size_t n, cap;
};

static int cmp_names(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static int has_suffix(const char *s, const char *suffix) {
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

/* The *.gguf files of `dir`, sorted by name. */
static void list_dir(const char *dir, struct name_list *out) {
    DIR *d = opendir(dir);
    if (!d)
        fail_msg("cannot open corpus directory %s", dir);
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (!has_suffix(e->d_name, ".gguf"))
            continue;
        if (out->n == out->cap) {
            size_t cap = out->cap ? out->cap * 2 : 64;
            char **p = realloc(out->names, cap * sizeof *p);
            assert_non_null(p);
            out->names = p;
            out->cap = cap;
        }
        out->names[out->n] = strdup(e->d_name);
        assert_non_null(out->names[out->n]);
        out->n++;
    }
    closedir(d);
    if (out->n > 1)
        qsort(out->names, out->n, sizeof *out->names, cmp_names);
}

static void free_list(struct name_list *l) {
    for (size_t i = 0; i < l->n; i++)
        free(l->names[i]);
    free(l->names);
}

/* NULL if a full open of the model at `path` decodes two tokens to finite logits, else
 * what went wrong (in msg). */
static const char *run_model(const char *path, char *msg, size_t cap) {
    pi_model_params params;
    pi_model_default_params(&params);
    params.errbuf = msg;
    params.errbuf_cap = cap;
    pi_model *m;
    if (pi_model_open(path, &params, &m) != PI_OK)
        return "a full open failed";
    pi_ctx_params cp;
    pi_ctx_default_params(&cp);
    cp.n_ctx = 8;
    cp.n_threads = 1;
    cp.errbuf = msg;
    cp.errbuf_cap = cap;
    pi_ctx *c;
    const char *why = NULL;
    if (pi_ctx_create(m, &cp, &c) != PI_OK) {
        why = "pi_ctx_create failed";
    } else {
        const int32_t toks[2] = {0, 1};
        if (pi_ctx_decode(c, toks, 2) != PI_OK) {
            snprintf(msg, cap, "%s", pi_ctx_errmsg(c));
            why = "decode failed";
        } else {
            const float *lg = pi_ctx_logits(c);
            for (int64_t i = 0; i < pi_model_n_vocab(m) && !why; i++)
                if (!isfinite(lg[i]))
                    why = "a logit is not finite";
        }
        pi_ctx_destroy(c);
    }
    pi_model_close(m);
    return why;
}

/* Open every file of corpus_root/sub and compare the status with `expect`; `full`: a
 * full open instead of metadata_only. */
static void check_folder(const char *sub, int expect, int full) {
    char dir[4096];
    int len = snprintf(dir, sizeof dir, "%s/%s", corpus_root, sub);
    assert_true(len > 0 && (size_t)len < sizeof dir);

    struct name_list files = {0};
    list_dir(dir, &files);
    if (files.n == 0)
        fail_msg("no .gguf files in %s", dir);

    size_t bad = 0;
    for (size_t i = 0; i < files.n; i++) {
        char path[4096 + 256];
        len = snprintf(path, sizeof path, "%s/%s", dir, files.names[i]);
        assert_true(len > 0 && (size_t)len < sizeof path);

        pi_model_params params;
        assert_int_equal(pi_model_default_params(&params), PI_OK);
        char errbuf[512];
        memset(errbuf, 0, sizeof errbuf);
        params.metadata_only = !full;
        params.errbuf = errbuf;
        params.errbuf_cap = sizeof errbuf;

        static int sentinel;
        pi_model *m = (pi_model *)(void *)&sentinel; /* must be overwritten */
        int st = pi_model_open(path, &params, &m);

        const char *why = NULL;
        if (st != expect)
            why = "wrong status";
        else if (expect == PI_OK && m == NULL)
            why = "PI_OK but no model";
        else if (expect != PI_OK && m != NULL)
            why = "failed but *out is not NULL";
        else if (expect != PI_OK && errbuf[0] == '\0')
            why = "failed without an error message";
        else if (expect == PI_OK && strncmp(files.names[i], "model_", 6) == 0)
            why = run_model(path, errbuf, sizeof errbuf);

        /* A TAP diagnostic line, so meson's TAP parser accepts it. */
        printf("# %-12s %-48s %d (%s) %s\n", sub, files.names[i], st, pi_status_str(st),
               errbuf);
        if (why) {
            bad++;
            print_error("FAIL %s/%s: %s: expected %d (%s), got %d (%s), message \"%s\"\n",
                        sub, files.names[i], why, expect, pi_status_str(expect), st,
                        pi_status_str(st), errbuf);
        }
        if (st == PI_OK && m != (pi_model *)(void *)&sentinel)
            pi_model_close(m);
    }
    size_t n = files.n;
    free_list(&files);
    if (bad)
        fail_msg("%zu of %zu files in %s/ gave the wrong result", bad, n, sub);
}

static void test_valid(void **state) {
    (void)state;
    check_folder("valid", PI_OK, 0);
}

static void test_malformed(void **state) {
    (void)state;
    check_folder("malformed", PI_ERR_FORMAT, 0);
}

/* refused/: valid containers whose values the model description refuses in a full open
 * (RoPE factors that are not positive and finite, a soft-cap that rounds to 0, a bad
 * sliding-window pattern entry, a fused tensor of the wrong width) */
static void test_refused(void **state) {
    (void)state;
    check_folder("refused", PI_ERR_FORMAT, 1);
}

static void test_unsupported(void **state) {
    (void)state;
    check_folder("unsupported", PI_ERR_UNSUPPORTED, 1);
    /* the message shows an architecture with a NUL as it is, not cut at the NUL */
    char path[4096], msg[512] = "";
    snprintf(path, sizeof path, "%s/unsupported/model_arch_nul.gguf", corpus_root);
    pi_model_params p;
    pi_model_default_params(&p);
    p.errbuf = msg;
    p.errbuf_cap = sizeof msg;
    pi_model *m;
    assert_int_equal(pi_model_open(path, &p, &m), PI_ERR_UNSUPPORTED);
    if (!strstr(msg, "architecture 'llama?x'"))
        fail_msg("%s", msg);
}

int main(int argc, char **argv) {
#ifdef PI_CORPUS_DIR
    corpus_root = PI_CORPUS_DIR;
#endif
    if (argc > 1)
        corpus_root = argv[1];
    if (!corpus_root) {
        fprintf(stderr, "usage: %s CORPUS_ROOT\n", argc > 0 ? argv[0] : "test_corpus");
        return 2;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_valid),
        cmocka_unit_test(test_malformed),
        cmocka_unit_test(test_unsupported),
        cmocka_unit_test(test_refused),
    };
    return cmocka_run_group_tests_name("corpus", tests, NULL, NULL);
}
