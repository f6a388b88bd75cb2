/* api_state.c -- save and restore a context's state (every sequence, or one), to
 * memory and to files. Format (docs/formats.md, "Context state"), little-endian:
 *
 *   magic "PISTATE\0", u32 version 1, u32 kind (bits 0..7: 0 whole context, 1 one
 *   sequence; bits 8..15: the RoPE factor set; bits 16..23: the KV cache's keys' type,
 *   PI_KV_TYPE_*; bits 24..31: its values', 0 when they are stored as the keys),
 *   u64 model identity, u32 n_layer, u32 K values per position, u32 V values per
 *   position, u32 n_vocab, u32 sequences that follow, u32 has_logits,
 *   [f32 logits[n_vocab]]                              (when has_logits)
 *   per sequence: u32 id, u32 len, then per layer K [len][nk] and V [len][nv] as
 *   the cache stores them (F16, Q8_0 or Q4_0 blocks)
 *   u64 FNV-1a of everything before it
 *
 * A load checks everything (size, checksum, identity, shape, ids, lengths) before it
 * changes anything. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "infer/ctx.h"
#include "util/hash.h"
#include "util/os.h"

#define STATE_VERSION 1u
#define HEADER_BYTES 48u
static const char MAGIC[8] = {'P', 'I', 'S', 'T', 'A', 'T', 'E', '\0'};


static void put32(uint8_t **p, uint32_t v) {
    memcpy(*p, &v, 4);
    *p += 4;
}

static void put64(uint8_t **p, uint64_t v) {
    memcpy(*p, &v, 8);
    *p += 8;
}

static uint32_t get32(const uint8_t **p) {
    uint32_t v;
    memcpy(&v, *p, 4);
    *p += 4;
    return v;
}

static uint64_t get64(const uint8_t **p) {
    uint64_t v;
    memcpy(&v, *p, 8);
    *p += 8;
    return v;
}

static void kv_home(const struct pi_ctx *c, const struct pi_backend_vtable **be,
                    struct pi_backend **b, struct pi_kv **kv) {
    const int dev = c->hy && c->hy->kv;
    *be = dev ? c->hy->be : c->be;
    *b = dev ? c->hy->b : c->b;
    *kv = dev ? c->hy->kv : c->kv;
}

/* Bytes of one position's K and V in the cache of c (k_bytes: K alone). */
static size_t per_pos(const struct pi_ctx *c, size_t *k_bytes) {
    const struct pi_hparams *hp = c->hp;
    const size_t kb = pi_kv_row_bytes(c->kv_type, hp->n_head_kv * hp->head_dim_k);
    if (k_bytes)
        *k_bytes = kb;
    return kb + pi_kv_row_bytes(c->kv_type_v, hp->n_head_kv * hp->head_dim_v);
}

/* Bytes of the state of `seq` (-1: all). */
static size_t state_size(const struct pi_ctx *c, int32_t seq) {
    const struct pi_hparams *hp = c->hp;
    size_t n = HEADER_BYTES + 8;
    if (seq < 0 && c->has_logits)
        n += (size_t)hp->n_vocab * 4;
    for (int64_t s = 0; s < c->n_seq; s++)
        if (seq < 0 || s == seq)
            n += 8 + (size_t)hp->n_layer * (size_t)c->seq_len[s] * per_pos(c, NULL);
    return n;
}

int pi_ctx_state_save(const pi_ctx *c, int32_t seq, void *buf, size_t cap, size_t *size) {
    if (!c || !size)
        return PI_ERR_INVALID_ARG;
    PI_TRY(pi_ctx_check_seq(c, seq, 1, "pi_ctx_state_save"));
    const struct pi_hparams *hp = c->hp;
    const size_t need = state_size(c, seq);
    *size = need;
    if (!buf || cap < need)
        return PI_ERR_RANGE;
    const int64_t nk = hp->n_head_kv * hp->head_dim_k, nv = hp->n_head_kv * hp->head_dim_v;
    size_t kb;
    const size_t per = per_pos(c, &kb);
    const int whole = seq < 0, logits = whole && c->has_logits;
    uint8_t *p = buf;
    memcpy(p, MAGIC, 8);
    p += 8;
    put32(&p, STATE_VERSION);
    /* kind: whole (0) or one sequence (1), and in bits 8..15 the RoPE factor set the
     * keys were rotated with (LongRoPE's short or long; 0 for every other model) */
    const uint32_t vt = c->kv_type_v == c->kv_type ? 0u : (uint32_t)c->kv_type_v;
    put32(&p, (whole ? 0u : 1u) | (uint32_t)c->rope_set << 8 | (uint32_t)c->kv_type << 16 |
                  vt << 24);
    put64(&p, pi_model_identity(c->model));
    put32(&p, (uint32_t)hp->n_layer);
    put32(&p, (uint32_t)nk);
    put32(&p, (uint32_t)nv);
    put32(&p, (uint32_t)hp->n_vocab);
    put32(&p, whole ? (uint32_t)c->n_seq : 1u);
    put32(&p, (uint32_t)logits);
    if (logits) {
        memcpy(p, c->logits, (size_t)hp->n_vocab * 4);
        p += (size_t)hp->n_vocab * 4;
    }
    const struct pi_backend_vtable *be;
    struct pi_backend *b;
    struct pi_kv *kv;
    kv_home(c, &be, &b, &kv);
    for (int64_t s = 0; s < c->n_seq; s++) {
        if (!whole && s != seq)
            continue;
        const int64_t len = c->seq_len[s];
        put32(&p, (uint32_t)s);
        put32(&p, (uint32_t)len);
        for (int64_t l = 0; l < hp->n_layer && len; l++) {
            int st = be->kv_get(b, kv, l * c->n_seq + s, 0, len, p, p + (size_t)len * kb);
            if (st < 0)
                return st;
            p += (size_t)len * per;
        }
    }
    put64(&p, pi_fnv1a(PI_FNV1A_INIT, buf, (size_t)(p - (uint8_t *)buf)));
    return PI_OK;
}


/* The name of a PI_KV_TYPE_* value, for messages. */
static const char *kv_name(uint32_t t) {
    return t == PI_KV_TYPE_Q8_0 ? "Q8_0" : t == PI_KV_TYPE_Q4_0 ? "Q4_0" : "F16";
}

int pi_ctx_state_load(pi_ctx *c, int32_t seq, const void *buf, size_t size) {
    if (!c || !buf)
        return PI_ERR_INVALID_ARG;
    PI_TRY(pi_ctx_check_seq(c, seq, 1, "pi_ctx_state_load"));
    pi_error_clear(&c->err);
    const struct pi_hparams *hp = c->hp;
    const int64_t nk = hp->n_head_kv * hp->head_dim_k, nv = hp->n_head_kv * hp->head_dim_v;
    size_t kb;
    const size_t per = per_pos(c, &kb);
    const uint8_t *p = buf, *end = p + size;
    if (size < HEADER_BYTES + 8 || memcmp(p, MAGIC, 8) != 0)
        PI_FAIL(&c->err, PI_ERR_FORMAT, "not a libpowerinfer context state (%zu bytes)", size);
    const uint64_t sum = pi_fnv1a(PI_FNV1A_INIT, buf, size - 8);
    const uint8_t *tail = end - 8;
    if (get64(&tail) != sum)
        PI_FAIL(&c->err, PI_ERR_FORMAT, "state checksum mismatch: truncated or corrupted");
    p += 8;
    const uint32_t version = get32(&p), kind_word = get32(&p);
    const uint32_t kind = kind_word & 0xffu, rope_set = kind_word >> 8 & 0xffu;
    const uint32_t kv_type = kind_word >> 16 & 0xffu, vt = kind_word >> 24;
    const uint32_t kv_type_v = vt ? vt : kv_type;
    const uint64_t id = get64(&p);
    const uint32_t n_layer = get32(&p), fk = get32(&p), fv = get32(&p), n_vocab = get32(&p);
    const uint32_t n_seq = get32(&p), has_logits = get32(&p);
    if (version != STATE_VERSION)
        PI_FAIL(&c->err, PI_ERR_FORMAT, "state version %u; this library reads %u", version,
                STATE_VERSION);
    if (kind > 1 || has_logits > 1 || (kind == 1 && (n_seq != 1 || has_logits)) ||
        rope_set > PI_ROPE_SET_LONG || kv_type > PI_KV_TYPE_Q4_0 || vt > PI_KV_TYPE_Q4_0)
        PI_FAIL(&c->err, PI_ERR_FORMAT, "state header is inconsistent");
    if ((seq < 0) != (kind == 0))
        PI_FAIL(&c->err, PI_ERR_INVALID_ARG, seq < 0 ? "a one-sequence state needs a target "
                "sequence" : "a whole-context state loads only with seq -1");
    if (id != pi_model_identity(c->model) || n_layer != hp->n_layer || fk != nk || fv != nv ||
        n_vocab != hp->n_vocab)
        PI_FAIL(&c->err, PI_ERR_FORMAT, "the state belongs to another model");
    if (rope_set != (uint32_t)c->rope_set) /* its keys carry the other rotation */
        PI_FAIL(&c->err, PI_ERR_FORMAT, "the state was saved by a context using LongRoPE's "
                "%s factors (n_ctx %s %lld); this one uses the %s ones",
                rope_set == PI_ROPE_SET_LONG ? "long" : "short",
                rope_set == PI_ROPE_SET_LONG ? "above" : "at most", (long long)hp->rope_ctx_orig,
                c->rope_set == PI_ROPE_SET_LONG ? "long" : "short");
    if (kv_type != (uint32_t)c->kv_type || kv_type_v != (uint32_t)c->kv_type_v)
        PI_FAIL(&c->err, PI_ERR_FORMAT, "the state holds a KV cache of %s keys and %s values; "
                "this context's has %s and %s (pi_ctx_params.kv_type, kv_type_v)",
                kv_name(kv_type), kv_name(kv_type_v), kv_name((uint32_t)c->kv_type),
                kv_name((uint32_t)c->kv_type_v));
    if (n_seq > (uint32_t)c->n_seq && kind == 0)
        PI_FAIL(&c->err, PI_ERR_RANGE, "the state holds %u sequences; the context has %lld",
                n_seq, (long long)c->n_seq);
    if (has_logits) {
        if ((size_t)(end - 8 - p) < (size_t)n_vocab * 4)
            PI_FAIL(&c->err, PI_ERR_FORMAT, "state truncated in its logits");
        p += (size_t)n_vocab * 4;
    }
    /* pass 1: check every sequence record */
    const uint8_t *recs = p;
    uint8_t seen[256] = {0}; /* n_seq_max <= 256 */
    for (uint32_t i = 0; i < n_seq; i++) {
        if (end - 8 - p < 8)
            PI_FAIL(&c->err, PI_ERR_FORMAT, "state truncated at sequence %u", i);
        const uint32_t sid = get32(&p), len = get32(&p);
        if (kind == 0 && (sid >= (uint32_t)c->n_seq || seen[sid]))
            PI_FAIL(&c->err, PI_ERR_FORMAT, "state: bad or repeated sequence id %u", sid);
        if (kind == 0)
            seen[sid] = 1;
        if (len > (uint64_t)c->n_ctx)
            PI_FAIL(&c->err, PI_ERR_RANGE, "state: sequence %u has %u positions; the context "
                    "holds %lld", sid, len, (long long)c->n_ctx);
        const uint64_t bytes = (uint64_t)n_layer * len * (uint64_t)per;
        if ((uint64_t)(end - 8 - p) < bytes)
            PI_FAIL(&c->err, PI_ERR_FORMAT, "state truncated in sequence %u", sid);
        p += bytes;
    }
    if (p != end - 8)
        PI_FAIL(&c->err, PI_ERR_FORMAT, "state has %zu stray bytes", (size_t)(end - 8 - p));
    /* pass 2: apply */
    const struct pi_backend_vtable *be;
    struct pi_backend *b;
    struct pi_kv *kv;
    kv_home(c, &be, &b, &kv);
    if (kind == 0)
        for (int64_t s = 0; s < c->n_seq; s++)
            c->seq_len[s] = 0;
    p = recs;
    for (uint32_t i = 0; i < n_seq; i++) {
        const uint32_t sid = get32(&p), len = get32(&p);
        const int64_t dst = kind == 0 ? (int64_t)sid : seq;
        if (kind == 1)
            c->seq_len[dst] = 0;
        for (uint32_t l = 0; l < n_layer && len; l++) {
            int st = be->kv_set(b, kv, (int64_t)l * c->n_seq + dst, 0, len, p, p + (size_t)len * kb);
            if (st < 0)
                PI_FAIL(&c->err, st, "the device failed restoring sequence %lld (now empty)",
                        (long long)dst);
            p += (size_t)len * per;
        }
        c->seq_len[dst] = len;
    }
    pi_embd_forget(c, kind == 0 ? -1 : seq);
    if (kind == 0) {
        c->has_logits = (int)has_logits;
        if (has_logits)
            memcpy(c->logits, (const uint8_t *)buf + HEADER_BYTES, (size_t)n_vocab * 4);
        c->n_entries = 0;
    }
    return PI_OK;
}

int pi_ctx_state_save_file(const pi_ctx *c, int32_t seq, const char *path) {
    if (!c || !path)
        return PI_ERR_INVALID_ARG;
    PI_TRY(pi_ctx_check_seq(c, seq, 1, "pi_ctx_state_save_file"));
    struct pi_ctx *m = (struct pi_ctx *)c; /* the error record only */
    size_t n = state_size(c, seq);
    uint8_t *buf = pi_malloc(&m->alloc, n);
    if (!buf)
        PI_FAIL(&m->err, PI_ERR_NOMEM, "out of memory for a state of %zu bytes", n);
    int st = pi_ctx_state_save(c, seq, buf, n, &n);
    char tmp[4096];
    FILE *fp = NULL;
    if (st >= 0)
        st = pi_os_create_temp(path, tmp, sizeof tmp, &fp, &m->err);
    if (st >= 0) {
        const int ok = fwrite(buf, 1, n, fp) == n;
        if (fclose(fp) != 0 || !ok) {
            pi_os_remove(tmp);
            st = pi_error_set(&m->err, PI_ERR_IO, "cannot write %s", tmp);
        } else if ((st = pi_os_replace(tmp, path, &m->err)) < 0) {
            pi_os_remove(tmp);
        }
    }
    pi_free(&m->alloc, buf);
    return st;
}

/* The largest state this context can hold: every sequence full, and the logits. */
static uint64_t max_state_size(const struct pi_ctx *c) {
    const struct pi_hparams *hp = c->hp;
    return HEADER_BYTES + 8 + (uint64_t)hp->n_vocab * 4 +
           (uint64_t)c->n_seq * (8 + (uint64_t)hp->n_layer * (uint64_t)c->n_ctx * per_pos(c, NULL));
}

int pi_ctx_state_load_file(pi_ctx *c, int32_t seq, const char *path) {
    if (!c || !path)
        return PI_ERR_INVALID_ARG;
    PI_TRY(pi_ctx_check_seq(c, seq, 1, "pi_ctx_state_load_file"));
    pi_error_clear(&c->err);
    /* the OS layer refuses directories, FIFOs and devices before reading anything */
    struct pi_file f;
    PI_TRY(pi_os_file_open(path, &f, &c->err));
    int st = PI_OK;
    uint8_t *buf = NULL;
    if (f.size > max_state_size(c) || f.size >= (uint64_t)SIZE_MAX) {
        st = pi_error_set(&c->err, PI_ERR_FORMAT, "%s has %llu bytes; a state of this "
                          "context has at most %llu", path, (unsigned long long)f.size,
                          (unsigned long long)max_state_size(c));
    } else {
        buf = pi_malloc(&c->alloc, f.size ? (size_t)f.size : 1);
        if (!buf)
            st = pi_error_set(&c->err, PI_ERR_NOMEM, "out of memory reading %s", path);
        else
            st = pi_os_file_read(&f, 0, buf, (size_t)f.size, path, &c->err);
    }
    pi_os_file_close(&f);
    if (st >= 0)
        st = pi_ctx_state_load(c, seq, buf, (size_t)f.size);
    pi_free(&c->alloc, buf);
    return st;
}
