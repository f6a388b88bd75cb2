/* testfile.h -- helpers shared by cmocka tests (include after <cmocka.h>): read a whole
 * file, open a model failing the test with the library's message. */
#ifndef PI_TESTS_TESTFILE_H
#define PI_TESTS_TESTFILE_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "powerinfer.h"

/* The whole file at `path` (malloc'd; the caller frees it) and its size. */
static inline uint8_t *tf_slurp(const char *path, size_t *size) {
    FILE *fp = fopen(path, "rb");
    if (!fp)
        fail_msg("cannot open %s", path);
    fseek(fp, 0, SEEK_END);
    long n = ftell(fp);
    fseek(fp, 0, SEEK_SET);
    uint8_t *buf = malloc((size_t)n);
    assert_non_null(buf);
    assert_int_equal(fread(buf, 1, (size_t)n, fp), (size_t)n);
    fclose(fp);
    *size = (size_t)n;
    return buf;
}

/* Open `path` with default parameters; a failure fails the test with the message. */
static inline pi_model *tf_open_model(const char *path) {
    pi_model *m;
    char err[256] = "";
    pi_model_params p;
    pi_model_default_params(&p);
    p.errbuf = err;
    p.errbuf_cap = sizeof err;
    if (pi_model_open(path, &p, &m) != PI_OK)
        fail_msg("%s: %s", path, err);
    return m;
}

#endif
