/* libFuzzer harness: the whole model open path (GGUF reader + description builder)
 * over arbitrary bytes, through pi_model_open_buffer, then every query. */
#include <stddef.h>
#include <stdint.h>

#include "model/model.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    for (int metadata_only = 0; metadata_only <= 1; metadata_only++) {
        pi_model_params p;
        pi_model_default_params(&p);
        p.metadata_only = metadata_only;
        char msg[256];
        p.errbuf = msg;
        p.errbuf_cap = sizeof msg;
        pi_model *m = NULL;
        if (pi_model_open_buffer(data, size, &p, &pi_default_allocator, &m) != PI_OK)
            continue;
        char buf[64];
        for (int64_t i = 0; i < pi_model_meta_count(m); i++) {
            const char *key = pi_model_meta_key(m, i);
            int64_t v;
            double d;
            (void)pi_model_meta_int(m, key, &v);
            (void)pi_model_meta_float(m, key, &d);
            (void)pi_model_meta_str(m, key, buf, sizeof buf);
            (void)pi_model_meta_to_string(m, key, 4, buf, sizeof buf);
            (void)pi_model_meta_arr_int(m, key, 0, &v);
            (void)pi_model_meta_arr_str(m, key, 1, buf, sizeof buf);
        }
        for (int64_t i = 0; i < pi_model_n_tensors(m); i++) {
            int nd;
            int64_t dims[4];
            (void)pi_model_tensor_shape(m, i, &nd, dims);
        }
        for (int64_t l = 0; l < pi_model_n_layer(m); l++)
            (void)pi_model_predictor_rank(m, l);
        pi_model_close(m);
    }
    return 0;
}
