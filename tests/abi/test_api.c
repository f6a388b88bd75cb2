/* API contract through the shared library: NULL and invalid arguments, params
 * struct_size rules, versions, status strings. argv[1] is a valid GGUF file. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include "powerinfer.h"

static const char *g_file;

/* Layout pins: bindings (ctypes, cffi, bindgen) rely on these offsets. */
_Static_assert(offsetof(pi_model_params, struct_size) == 0, "struct_size first");
_Static_assert(sizeof(void *) != 8 || offsetof(pi_model_params, log_fn) == 8, "log_fn");
_Static_assert(sizeof(void *) != 8 || offsetof(pi_model_params, errbuf_cap) == 56, "errbuf_cap");
/* pi_model_params: the first published layout ended after errbuf_cap (64 bytes) */
_Static_assert(sizeof(void *) != 8 || offsetof(pi_model_params, load_mode) == 64, "load_mode");
_Static_assert(sizeof(void *) != 8 || offsetof(pi_model_params, lock_memory) == 68, "lock_mem");
_Static_assert(sizeof(void *) != 8 || sizeof(pi_model_params) == 72, "pi_model_params size");
/* pi_ctx_params: the first published layout ended after f32_activations (40 bytes) */
_Static_assert(sizeof(void *) != 8 || offsetof(pi_ctx_params, f32_activations) == 32, "f32_act");
_Static_assert(sizeof(void *) != 8 || offsetof(pi_ctx_params, sparse_mode) == 36, "sparse_mode");
_Static_assert(sizeof(void *) != 8 || offsetof(pi_ctx_params, stats) == 48, "stats");
_Static_assert(sizeof(void *) != 8 || offsetof(pi_ctx_params, errbuf_cap) == 64, "ctx errbuf_cap");
_Static_assert(sizeof(void *) != 8 || offsetof(pi_ctx_params, device) == 72, "device");
_Static_assert(sizeof(void *) != 8 || offsetof(pi_ctx_params, device_budget) == 80, "budget");
_Static_assert(sizeof(void *) != 8 || offsetof(pi_ctx_params, plan_stats) == 88, "plan_stats");
_Static_assert(sizeof(void *) != 8 || offsetof(pi_ctx_params, plan_file) == 104, "plan_file");
_Static_assert(sizeof(void *) != 8 || offsetof(pi_ctx_params, n_seq_max) == 112, "n_seq_max");
_Static_assert(sizeof(void *) != 8 || offsetof(pi_ctx_params, check_numerics) == 116, "check");
_Static_assert(sizeof(void *) != 8 || offsetof(pi_ctx_params, embeddings) == 120, "embeddings");
_Static_assert(sizeof(void *) != 8 || offsetof(pi_ctx_params, sparse_thresholds) == 128, "thr");
_Static_assert(sizeof(void *) != 8 || offsetof(pi_ctx_params, gate_histogram) == 148, "hist");
_Static_assert(sizeof(void *) != 8 || offsetof(pi_ctx_params, device_graphs) == 152, "graphs");
_Static_assert(sizeof(void *) != 8 || offsetof(pi_ctx_params, kv_type) == 156, "kv_type");
_Static_assert(sizeof(void *) != 8 || offsetof(pi_ctx_params, kv_type_v) == 160, "kv_type_v");
_Static_assert(sizeof(void *) != 8 || sizeof(pi_ctx_params) == 168, "pi_ctx_params size");
_Static_assert(sizeof(void *) != 8 || offsetof(pi_sparsify_params, down_error) == 80, "down_err");
_Static_assert(sizeof(void *) != 8 || offsetof(pi_sparsify_params, method) == 88, "method");
_Static_assert(sizeof(void *) != 8 || offsetof(pi_sparsify_params, neuron_order) == 96, "order");
_Static_assert(sizeof(void *) != 8 || offsetof(pi_sparsify_params, keep_down) == 104, "keep");
_Static_assert(sizeof(void *) != 8 || sizeof(pi_sparsify_params) == 112, "sparsify size");
_Static_assert(sizeof(pi_layer_stats) == 104, "pi_layer_stats size");
_Static_assert(offsetof(pi_layer_stats, ns_ffn) == 96, "ns_ffn");

static void test_versions(void **state) {
    (void)state;
    assert_int_equal(pi_version(), PI_VERSION_NUMBER);
    assert_int_equal(pi_abi_version(), PI_ABI_VERSION);
    char want[32];
    snprintf(want, sizeof want, "%d.%d.%d", PI_VERSION_MAJOR, PI_VERSION_MINOR,
             PI_VERSION_PATCH);
    assert_string_equal(pi_version_string(), want);
}

static void test_status_strings(void **state) {
    (void)state;
    for (int s = PI_ERR_NUMERIC; s <= PI_OK; s++) {
        assert_non_null(pi_status_str(s));
        assert_string_not_equal(pi_status_str(s), "unknown status");
    }
    assert_string_equal(pi_status_str(-999), "unknown status");
    assert_string_equal(pi_status_str(1), "unknown status");
    assert_string_equal(pi_type_name(PI_TYPE_Q4_0), "Q4_0");
    assert_string_equal(pi_type_name(PI_TYPE_BF16), "BF16");
    assert_null(pi_type_name(4));
    assert_null(pi_type_name(-1));
    assert_null(pi_type_name(1 << 20));
}

static void test_null_args(void **state) {
    (void)state;
    pi_model *m = (pi_model *)&m;
    assert_int_equal(pi_model_default_params(NULL), PI_ERR_INVALID_ARG);
    assert_int_equal(pi_model_open(NULL, NULL, &m), PI_ERR_INVALID_ARG);
    assert_null(m);
    assert_int_equal(pi_model_open(g_file, NULL, NULL), PI_ERR_INVALID_ARG);
    pi_model_close(NULL);
    assert_non_null(pi_model_errmsg(NULL));
    assert_string_equal(pi_model_arch(NULL), "");
    assert_int_equal(pi_model_is_sparse(NULL), 0);
    assert_int_equal(pi_model_n_layer(NULL), 0);
    assert_int_equal(pi_model_n_vocab(NULL), 0);
    assert_int_equal(pi_model_meta_count(NULL), 0);
    assert_int_equal(pi_model_n_tensors(NULL), 0);
    assert_null(pi_model_meta_key(NULL, 0));
    assert_null(pi_model_tensor_name(NULL, 0));
    int64_t v;
    double d;
    char buf[8];
    assert_int_equal(pi_model_meta_int(NULL, "k", &v), PI_ERR_INVALID_ARG);
    assert_int_equal(pi_model_meta_float(NULL, "k", &d), PI_ERR_INVALID_ARG);
    assert_int_equal(pi_model_meta_str(NULL, "k", buf, sizeof buf), PI_ERR_INVALID_ARG);
    assert_int_equal(pi_model_meta_type(NULL, "k", NULL, NULL, NULL), PI_ERR_INVALID_ARG);
    assert_int_equal(pi_model_tensor_type(NULL, 0), PI_ERR_INVALID_ARG);
    assert_int_equal(pi_model_tensor_find(NULL, "x", &v), PI_ERR_INVALID_ARG);

    pi_model_params p;
    pi_model_default_params(&p);
    p.metadata_only = 1; /* the file is a container sample, not a runnable model */
    assert_int_equal(pi_model_open(g_file, &p, &m), PI_OK);
    assert_int_equal(pi_model_meta_int(m, NULL, &v), PI_ERR_INVALID_ARG);
    assert_int_equal(pi_model_meta_int(m, "general.architecture", NULL), PI_ERR_INVALID_ARG);
    assert_int_equal(pi_model_meta_str(m, NULL, buf, sizeof buf), PI_ERR_INVALID_ARG);
    assert_int_equal(pi_model_tensor_find(m, NULL, &v), PI_ERR_INVALID_ARG);
    assert_int_equal(pi_model_tensor_find(m, "x", NULL), PI_ERR_INVALID_ARG);
    int nd;
    assert_int_equal(pi_model_tensor_shape(m, 0, NULL, NULL), PI_ERR_INVALID_ARG);
    assert_int_equal(pi_model_tensor_shape(m, 0, &nd, NULL), PI_ERR_INVALID_ARG);
    pi_model_close(m);
}

static void test_missing_file(void **state) {
    (void)state;
    char msg[256] = "";
    pi_model_params p;
    pi_model_default_params(&p);
    p.errbuf = msg;
    p.errbuf_cap = sizeof msg;
    pi_model *m;
    assert_int_equal(pi_model_open("/no/such/model.gguf", &p, &m), PI_ERR_IO);
    assert_null(m);
    assert_non_null(strstr(msg, "/no/such/model.gguf"));
    /* A tiny errbuf is still terminated. */
    char tiny[4] = "zzz";
    p.errbuf = tiny;
    p.errbuf_cap = 2;
    assert_int_equal(pi_model_open("/no/such/model.gguf", &p, &m), PI_ERR_IO);
    assert_int_equal(tiny[1], '\0');
    assert_int_equal(tiny[2], 'z');
}

/* Params from an older caller (smaller struct_size) and from a newer one. */
static void test_struct_size(void **state) {
    (void)state;
    struct {
        pi_model_params p;
        unsigned char future[16];
    } big;
    memset(&big, 0, sizeof big);
    pi_model_default_params(&big.p);
    assert_int_equal(big.p.struct_size, sizeof(pi_model_params));
    big.p.metadata_only = 1;
    pi_model *m;
    big.p.struct_size = (uint32_t)sizeof big;
    assert_int_equal(pi_model_open(g_file, &big.p, &m), PI_OK); /* zero tail: fine */
    pi_model_close(m);
    big.future[3] = 1;
    assert_int_equal(pi_model_open(g_file, &big.p, &m), PI_ERR_UNSUPPORTED);
    assert_null(m);
    big.p.struct_size = 4;
    assert_int_equal(pi_model_open(g_file, &big.p, &m), PI_ERR_INVALID_ARG);
    big.p.struct_size = 0;
    assert_int_equal(pi_model_open(g_file, &big.p, &m), PI_ERR_INVALID_ARG);
    /* The first published size (64 bytes, up to errbuf_cap) is honoured: the fields
     * after it are not read, so whatever lies there means the defaults (mmap). */
    big.future[3] = 0;
    big.p.load_mode = 77;
    big.p.lock_memory = 1;
    big.p.struct_size = (uint32_t)(offsetof(pi_model_params, errbuf_cap) + sizeof(size_t));
    assert_int_equal(pi_model_open(g_file, &big.p, &m), PI_OK);
    pi_model_close(m);
    big.p.struct_size = (uint32_t)(offsetof(pi_model_params, errbuf_cap) + sizeof(size_t) - 1);
    assert_int_equal(pi_model_open(g_file, &big.p, &m), PI_ERR_INVALID_ARG);
    /* At full size the same load_mode is read, and refused. */
    big.p.struct_size = (uint32_t)sizeof big.p;
    assert_int_equal(pi_model_open(g_file, &big.p, &m), PI_ERR_INVALID_ARG);
    assert_null(m);
    big.p.load_mode = PI_LOAD_READ;
    big.p.lock_memory = 0;
    assert_int_equal(pi_model_open(g_file, &big.p, &m), PI_OK);
    pi_model_close(m);
}

int main(int argc, char **argv) {
    if (argc < 2)
        return 99;
    g_file = argv[1];
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_versions),   cmocka_unit_test(test_status_strings),
        cmocka_unit_test(test_null_args),  cmocka_unit_test(test_missing_file),
        cmocka_unit_test(test_struct_size),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
