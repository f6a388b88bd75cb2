#include "testmodel.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/gguf.h"
#include "runtime/fp16.h"
#include "runtime/types.h"

void tm_default(struct tm_spec *s) {
    memset(s, 0, sizeof *s);
    s->arch = "llama";
    s->n_layer = 2;
    s->n_embd = 64;
    s->n_ff = 96;
    s->n_head = 4;
    s->n_head_kv = 2;
    s->n_vocab = 40;
    s->n_ctx = 128;
    s->wtype = PI_TYPE_F32;
    s->pred_rank = 8;
    s->with_tokens = 1;
    s->seed = 1;
}

static float rnd(uint32_t *st) {
    *st = *st * 1664525u + 1013904223u;
    return (float)((*st >> 8) & 0xffff) / 65536.0f - 0.5f;
}

/* Encode n floats as `type` into a new buffer. */
static uint8_t *encode(uint32_t type, int64_t n, uint32_t *st, uint64_t *nbytes) {
    uint64_t bytes = pi_type_row_bytes(type, n);
    uint8_t *buf = calloc(1, bytes ? bytes : 1);
    if (!buf)
        return NULL;
    *nbytes = bytes;
    if (type == PI_TYPE_F32) {
        for (int64_t i = 0; i < n; i++) {
            float v = rnd(st) * 0.2f;
            memcpy(buf + 4 * i, &v, 4);
        }
    } else if (type == PI_TYPE_F16) {
        for (int64_t i = 0; i < n; i++) {
            uint16_t h = pi_fp32_to_fp16(rnd(st) * 0.2f);
            memcpy(buf + 2 * i, &h, 2);
        }
    } else if (type == PI_TYPE_Q8_0 || type == PI_TYPE_Q4_0) {
        int q8 = type == PI_TYPE_Q8_0;
        uint32_t bb = q8 ? 34 : 18;
        for (int64_t b = 0; b < n / 32; b++) {
            uint8_t *blk = buf + b * bb;
            uint16_t d = pi_fp32_to_fp16(0.01f);
            memcpy(blk, &d, 2);
            for (uint32_t j = 2; j < bb; j++) {
                *st = *st * 1664525u + 1013904223u;
                blk[j] = (uint8_t)(*st >> 24);
            }
        }
    }
    return buf;
}

struct ctx {
    struct gguf_writer *w;
    const struct tm_spec *s;
    uint32_t st;
    int status;
};

static void tensor(struct ctx *c, const char *name, int64_t ne0, int64_t ne1, int is_norm) {
    if (c->status < 0 || (c->s->omit && !strcmp(c->s->omit, name)))
        return;
    int64_t ne[2] = {ne0, ne1};
    uint32_t nd = is_norm ? 1 : 2;
    if (c->s->misshape && !strcmp(c->s->misshape, name))
        ne[nd - 1] += is_norm ? 1 : 1;
    uint32_t type = is_norm ? PI_TYPE_F32 : c->s->wtype;
    if (pi_type_row_bytes(type, ne[0]) == 0)
        type = PI_TYPE_F32; /* rows that do not fit the block size stay F32 */
    uint64_t nbytes;
    uint8_t *data = encode(type, ne[0] * (nd == 2 ? ne[1] : 1), &c->st, &nbytes);
    if (!data) {
        c->status = PI_ERR_NOMEM;
        return;
    }
    if (c->s->poison && !strcmp(c->s->poison, name)) {
        if (type == PI_TYPE_F32) {
            memcpy(data, &c->s->poison_value, 4);
        } else if (type == PI_TYPE_F16) {
            uint16_t h = pi_fp32_to_fp16(c->s->poison_value);
            memcpy(data, &h, 2);
        }
    }
    c->status = gguf_writer_add_tensor(c->w, name, type, nd, ne, data);
    free(data);
}

static void u32kv(struct ctx *c, const char *name, uint32_t v) {
    if (c->status < 0 || (c->s->skip_key && !strcmp(c->s->skip_key, name)))
        return;
    char key[128];
    snprintf(key, sizeof key, "%s.%s", c->s->arch, name);
    c->status = gguf_writer_add_scalar(c->w, key, PI_META_U32, &v);
}

int tm_write(const struct tm_spec *s, const char *path) {
    struct ctx c = {NULL, s, s->seed, PI_OK};
    int st = gguf_writer_create(&pi_default_allocator, &c.w);
    if (st < 0)
        return st;
    c.status = gguf_writer_add_string(c.w, "general.architecture", s->arch);
    if (c.status == PI_OK)
        c.status = gguf_writer_add_string(c.w, "general.name", "test model");
    u32kv(&c, "context_length", (uint32_t)s->n_ctx);
    u32kv(&c, "embedding_length", (uint32_t)s->n_embd);
    u32kv(&c, "block_count", (uint32_t)s->n_layer);
    u32kv(&c, "feed_forward_length", (uint32_t)s->n_ff);
    u32kv(&c, "attention.head_count", (uint32_t)s->n_head);
    u32kv(&c, "attention.head_count_kv", (uint32_t)s->n_head_kv);
    if (s->extra_key)
        u32kv(&c, s->extra_key, s->extra_key_value);
    if (s->extra_f32_key && c.status == PI_OK) {
        char key[128];
        snprintf(key, sizeof key, "%s.%s", s->arch, s->extra_f32_key);
        c.status = gguf_writer_add_scalar(c.w, key, PI_META_F32, &s->extra_f32_value);
    }
    if (c.status == PI_OK) {
        char key[128];
        float eps = 1e-5f;
        snprintf(key, sizeof key, "%s.attention.layer_norm_rms_epsilon", s->arch);
        c.status = gguf_writer_add_scalar(c.w, key, PI_META_F32, &eps);
    }
    if (c.status == PI_OK && s->sparse)
        c.status = gguf_writer_add_scalar(c.w, "powerinfer.sparse_threshold", PI_META_F32,
                                          &s->threshold);
    if (c.status == PI_OK && s->with_tokens) {
        const char **toks = calloc((size_t)s->n_vocab, sizeof *toks);
        char *store = calloc((size_t)s->n_vocab, 16);
        if (!toks || !store) {
            c.status = PI_ERR_NOMEM;
        } else {
            for (int i = 0; i < s->n_vocab; i++) {
                snprintf(store + 16 * i, 16, "tok%d", i);
                toks[i] = store + 16 * i;
            }
            c.status = gguf_writer_add_string_array(c.w, "tokenizer.ggml.tokens", toks,
                                                    (uint64_t)s->n_vocab);
        }
        free(toks);
        free(store);
    }
    const int64_t E = s->n_embd, F = s->n_ff, hd = s->n_embd / s->n_head;
    tensor(&c, "token_embd.weight", E, s->n_vocab, 0);
    tensor(&c, "output_norm.weight", E, 0, 1);
    if (!s->tied)
        tensor(&c, "output.weight", E, s->n_vocab, 0);
    char n[96];
    for (int l = 0; l < s->n_layer; l++) {
#define N(x) (snprintf(n, sizeof n, "blk.%d." x ".weight", l), n)
        tensor(&c, N("attn_norm"), E, 0, 1);
        tensor(&c, N("attn_q"), E, s->n_head * hd, 0);
        tensor(&c, N("attn_k"), E, s->n_head_kv * hd, 0);
        tensor(&c, N("attn_v"), E, s->n_head_kv * hd, 0);
        tensor(&c, N("attn_output"), s->n_head * hd, E, 0);
        tensor(&c, N("ffn_norm"), E, 0, 1);
        tensor(&c, N("ffn_gate"), E, F, 0);
        tensor(&c, N("ffn_up"), E, F, 0);
        if (s->sparse) {
            tensor(&c, N("ffn_down_t"), E, F, 0);
            tensor(&c, N("fc1"), E, s->pred_rank + l, 0);
            tensor(&c, N("fc2"), s->pred_rank + l, F, 0);
        } else {
            tensor(&c, N("ffn_down"), F, E, 0);
        }
#undef N
    }
    if (s->extra && c.status == PI_OK) {
        struct tm_spec copy = *s;
        copy.wtype = PI_TYPE_F32;
        c.s = &copy;
        tensor(&c, s->extra, E, F, 0);
        c.s = s;
    }
    if (c.status == PI_OK)
        c.status = gguf_writer_write_file(c.w, path, s->sparse ? GGUF_MAGIC_PWRI : GGUF_MAGIC_GGUF,
                                          NULL);
    gguf_writer_destroy(c.w);
    return c.status;
}

int tm_write_split(const char *path, const char *arch, int sparse, uint32_t wtype,
                   uint32_t seed) {
    struct tm_spec s;
    tm_default(&s);
    s.arch = arch;
    s.sparse = sparse;
    s.wtype = wtype;
    s.n_ff = 128;
    s.pred_rank = 32;
    s.seed = seed;
    return tm_write(&s, path);
}
