/* desc.c -- from GGUF metadata and tensor table to a checked model description. */
#include "model/desc.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "runtime/types.h"

/* Architectures known to exist in GGUF/PowerInfer files but not run by this build:
 * they fail with PI_ERR_UNSUPPORTED rather than as unknown. */
static const char *const known_unsupported[] = {
    "gpt2", "gptj", "gptneox", "mpt", "starcoder", "persimmon", "refact", "bloom",
    "stablelm", "baichuan", "qwen", "phi2", "phimoe", "gemma",
    "gemma3n", "mistral3", "deepseek", "deepseek2", "command-r", "cohere2", "olmo",
    "olmo2", "granite", "exaone", "mamba", "bert", "t5", "llama4", NULL,
};

struct reader {
    const struct gguf_file *f;
    char prefix[64]; /* "llama." */
    struct pi_error *err;
};

static int get_str(const struct reader *r, const char *key, const char **s, uint64_t *len) {
    const struct gguf_kv *kv = gguf_find_kv(r->f, key);
    if (!kv)
        return PI_ERR_NOT_FOUND;
    if (kv->type != PI_META_STRING)
        PI_FAIL(r->err, PI_ERR_FORMAT, "metadata '%s' must be a string", key);
    return gguf_kv_str(r->f, kv, 0, s, len);
}

/* An integer hyper-parameter "<arch>.<name>"; `def` < 0 means required. */
static int get_int(const struct reader *r, const char *name, int64_t def, int64_t lo,
                   int64_t hi, int64_t *out) {
    char key[128];
    snprintf(key, sizeof key, "%s%s", r->prefix, name);
    const struct gguf_kv *kv = gguf_find_kv(r->f, key);
    if (!kv) {
        if (def < 0)
            PI_FAIL(r->err, PI_ERR_FORMAT, "required metadata '%s' is missing", key);
        *out = def;
        return PI_OK;
    }
    if (kv->type == PI_META_ARRAY)
        PI_FAIL(r->err, PI_ERR_UNSUPPORTED,
                "metadata '%s' is an array (per-layer values are not supported)", key);
    int64_t v;
    if (kv->type == PI_META_BOOL || gguf_kv_int(r->f, kv, 0, &v) < 0)
        PI_FAIL(r->err, PI_ERR_FORMAT, "metadata '%s' must be an integer", key);
    if (v < lo || v > hi)
        PI_FAIL(r->err, PI_ERR_FORMAT, "metadata '%s' = %lld is outside [%lld, %lld]", key,
                (long long)v, (long long)lo, (long long)hi);
    *out = v;
    return PI_OK;
}

static int get_float(const struct reader *r, const char *key, float def, float lo, float hi,
                     float *out) {
    const struct gguf_kv *kv = gguf_find_kv(r->f, key);
    if (!kv) {
        *out = def;
        return PI_OK;
    }
    double v;
    if ((kv->type != PI_META_F32 && kv->type != PI_META_F64) ||
        gguf_kv_float(r->f, kv, 0, &v) < 0)
        PI_FAIL(r->err, PI_ERR_FORMAT, "metadata '%s' must be a float", key);
    if (!(v >= lo && v <= hi)) /* also rejects NaN */
        PI_FAIL(r->err, PI_ERR_FORMAT, "metadata '%s' = %g is outside [%g, %g]", key, v,
                (double)lo, (double)hi);
    if (v != 0.0 && (float)v == 0.0f) /* an F64 that a float cannot hold: it would read as 0 */
        PI_FAIL(r->err, PI_ERR_FORMAT, "metadata '%s' = %g rounds to 0 as a float", key, v);
    *out = (float)v;
    return PI_OK;
}

static int get_arch_float(const struct reader *r, const char *name, float def, float lo,
                          float hi, float *out) {
    char key[128];
    snprintf(key, sizeof key, "%s%s", r->prefix, name);
    return get_float(r, key, def, lo, hi, out);
}

/* Keys other engines apply to these architectures that change what is computed: a file
 * with one of them at a value other than its neutral one would run, and compute
 * something else than it describes, so it is refused until the computation exists
 * (the [archs] issue). */
static const struct {
    const char *name, *what;
    float neutral;
} compute_keys[] = {
    {"embedding_scale", "embedding multiplier", 1.0f},
    {"residual_scale", "residual multiplier", 1.0f},
    {"logit_scale", "logit scale", 1.0f},
    {"rope.scaling.yarn_log_multiplier", "YaRN log multiplier", 0.0f},
    {"attention.clamp_kqv", "q/k/v clamping (OLMo's clip_qkv)", 0.0f},
};

static int refuse_unsupported_keys(const struct reader *r) {
    for (size_t i = 0; i < sizeof compute_keys / sizeof compute_keys[0]; i++) {
        float v = compute_keys[i].neutral;
        PI_TRY(get_arch_float(r, compute_keys[i].name, compute_keys[i].neutral, -1e30f, 1e30f,
                              &v));
        if (v != compute_keys[i].neutral)
            PI_FAIL(r->err, PI_ERR_UNSUPPORTED, "metadata '%s%s' = %g (%s) is not supported "
                    "yet: the model would run without it", r->prefix, compute_keys[i].name,
                    (double)v, compute_keys[i].what);
    }
    return PI_OK;
}


/* pi_model_sparsify's keys (docs/formats.md, "Sparsified files"): a dense-magic file
 * with powerinfer.sparsify.method "cats" stores ffn_down_t instead of ffn_down and
 * per-layer thresholds for PI_SPARSE_THRESHOLD; its FFN must be gated with an
 * activation the thresholded path computes. */
static int read_sparsify(struct reader *r, struct pi_hparams *hp) {
    const struct gguf_kv *mk = gguf_find_kv(r->f, "powerinfer.sparsify.method");
    hp->sparsified = 0;
    if (!mk)
        return PI_OK;
    if (hp->sparse)
        PI_FAIL(r->err, PI_ERR_FORMAT, "a PowerInfer (PWRI) file with powerinfer.sparsify "
                "keys: a file is one or the other");
    const char *s;
    uint64_t n;
    if (mk->type != PI_META_STRING || gguf_kv_str(r->f, mk, 0, &s, &n) < 0)
        PI_FAIL(r->err, PI_ERR_FORMAT, "metadata 'powerinfer.sparsify.method' must be a string");
    if (n != 4 || (memcmp(s, "cats", 4) != 0 && memcmp(s, "teal", 4) != 0))
        PI_FAIL(r->err, PI_ERR_UNSUPPORTED, "powerinfer.sparsify.method '%.*s' is not "
                "supported (cats and teal are)", (int)(n > 32 ? 32 : n), s);
    hp->teal = memcmp(s, "teal", 4) == 0;
    if (!pi_ffn_act_thresholdable(hp->ffn_act))
        PI_FAIL(r->err, PI_ERR_UNSUPPORTED, "powerinfer.sparsify: this FFN activation is not "
                "thresholded (silu, gelu, relu are)");
    const struct gguf_kv *tk = gguf_find_kv(r->f, "powerinfer.sparsify.thresholds");
    if (!tk || tk->type != PI_META_ARRAY || tk->elem_type != PI_META_F32 ||
        tk->n != (uint64_t)hp->n_layer)
        PI_FAIL(r->err, PI_ERR_FORMAT, "metadata 'powerinfer.sparsify.thresholds' must be an "
                "array of %lld F32 (one per layer)", (long long)hp->n_layer);
    for (uint64_t i = 0; i < tk->n; i++) {
        double v;
        if (gguf_kv_float(r->f, tk, i, &v) < 0 || !isfinite(v) || fabs(v) > 1e30)
            PI_FAIL(r->err, PI_ERR_FORMAT, "powerinfer.sparsify.thresholds[%llu] is not a "
                    "finite number", (unsigned long long)i);
    }
    hp->sparsified = 1;
    return PI_OK;
}

/* rope.scaling.*: none, linear, YaRN or LongRoPE (the latter also when the file has
 * LongRoPE factor tensors and no type, as Phi-3 conversions do). */
static int read_rope_scaling(struct reader *r, struct pi_hparams *hp) {
    hp->rope_scale = 1.0f;
    hp->rope_scaling = PI_ROPE_NONE;
    hp->rope_attn_factor = 1.0f;
    hp->yarn_beta_fast = 32.0f;
    hp->yarn_beta_slow = 1.0f;
    hp->rope_ctx_orig = hp->n_ctx_train;
    const char *stype;
    uint64_t slen;
    char key[128];
    snprintf(key, sizeof key, "%srope.scaling.type", r->prefix);
    int st = get_str(r, key, &stype, &slen);
    if (st == PI_OK) {
        if (slen == 6 && memcmp(stype, "linear", 6) == 0)
            hp->rope_scaling = PI_ROPE_LINEAR;
        else if (slen == 4 && memcmp(stype, "yarn", 4) == 0)
            hp->rope_scaling = PI_ROPE_YARN;
        else if (slen == 8 && memcmp(stype, "longrope", 8) == 0)
            hp->rope_scaling = PI_ROPE_LONGROPE;
        else if (!(slen == 4 && memcmp(stype, "none", 4) == 0))
            PI_FAIL(r->err, PI_ERR_UNSUPPORTED, "rope scaling type '%.*s' is not supported "
                    "(none, linear, yarn, longrope are)", (int)(slen > 32 ? 32 : slen), stype);
    } else if (st != PI_ERR_NOT_FOUND) {
        return st;
    }
    if (hp->rope_scaling == PI_ROPE_NONE && gguf_find_tensor(r->f, "rope_factors_long.weight") >= 0)
        hp->rope_scaling = PI_ROPE_LONGROPE;
    if (hp->rope_scaling == PI_ROPE_LINEAR || hp->rope_scaling == PI_ROPE_YARN)
        PI_TRY(get_arch_float(r, "rope.scaling.factor", 1.0f, 1e-3f, 1e6f, &hp->rope_scale));
    else if (st == PI_ERR_NOT_FOUND && hp->rope_scaling == PI_ROPE_NONE) /* legacy linear key */
        PI_TRY(get_arch_float(r, "rope.scale_linear", 1.0f, 1e-3f, 1e6f, &hp->rope_scale));
    float legacy = 1.0f;
    PI_TRY(get_arch_float(r, "rope.scale_linear", 1.0f, 1e-3f, 1e6f, &legacy));
    if (legacy != hp->rope_scale && legacy != 1.0f)
        PI_FAIL(r->err, PI_ERR_UNSUPPORTED, "metadata '%srope.scale_linear' = %g does not go "
                "with the file's other RoPE scaling; refusing rather than picking one",
                r->prefix, (double)legacy);
    PI_TRY(get_int(r, "rope.scaling.original_context_length", hp->n_ctx_train, 1,
                   (int64_t)1 << 30, &hp->rope_ctx_orig));
    PI_TRY(get_arch_float(r, "rope.scaling.attn_factor", 1.0f, 1e-3f, 1e3f,
                          &hp->rope_attn_factor));
    PI_TRY(get_arch_float(r, "rope.scaling.yarn_beta_fast", 32.0f, 1e-3f, 1e6f,
                          &hp->yarn_beta_fast));
    PI_TRY(get_arch_float(r, "rope.scaling.yarn_beta_slow", 1.0f, 1e-3f, 1e6f,
                          &hp->yarn_beta_slow));
    float ext = 1.0f;
    PI_TRY(get_arch_float(r, "rope.scaling.yarn_ext_factor", 1.0f, 0.0f, 1e3f, &ext));
    if (hp->rope_scaling == PI_ROPE_YARN && ext != 1.0f)
        PI_FAIL(r->err, PI_ERR_UNSUPPORTED, "metadata '%srope.scaling.yarn_ext_factor' = %g "
                "is not supported (1 is)", r->prefix, (double)ext);
    return PI_OK;
}

static int read_hparams(struct reader *r, struct pi_hparams *hp, const struct pi_logger *lg) {
    const int64_t big = PI_MAX_WIDTH;
    PI_TRY(get_int(r, "block_count", -1, 1, PI_MAX_LAYERS, &hp->n_layer));
    PI_TRY(get_int(r, "embedding_length", -1, 1, big, &hp->n_embd));
    PI_TRY(get_int(r, "feed_forward_length", -1, 1, big, &hp->n_ff));
    PI_TRY(get_int(r, "attention.head_count", -1, 1, hp->n_embd, &hp->n_head));
    PI_TRY(get_int(r, "attention.head_count_kv", hp->n_head, 1, hp->n_head, &hp->n_head_kv));
    if (hp->n_head % hp->n_head_kv)
        PI_FAIL(r->err, PI_ERR_FORMAT,
                "attention.head_count %lld is not a multiple of head_count_kv %lld",
                (long long)hp->n_head, (long long)hp->n_head_kv);
    char klkey[128];
    snprintf(klkey, sizeof klkey, "%sattention.key_length", r->prefix);
    if (hp->n_embd % hp->n_head && !gguf_find_kv(r->f, klkey))
        PI_FAIL(r->err, PI_ERR_FORMAT,
                "embedding_length %lld is not a multiple of head_count %lld",
                (long long)hp->n_embd, (long long)hp->n_head);
    PI_TRY(get_int(r, "attention.key_length", hp->n_embd / hp->n_head, 1, big,
                   &hp->head_dim_k));
    PI_TRY(get_int(r, "attention.value_length", hp->head_dim_k, 1, big, &hp->head_dim_v));
    /* n_head <= n_embd <= 2^24 and head dims <= 2^24: the products fit an int64_t */
    const int64_t qd = hp->n_head * hp->head_dim_k, ad = hp->n_head * hp->head_dim_v;
    if (qd > big || ad > big)
        PI_FAIL(r->err, PI_ERR_FORMAT, "attention.head_count %lld x key_length %lld / "
                "value_length %lld gives rows of %lld values, above the limit of %lld",
                (long long)hp->n_head, (long long)hp->head_dim_k, (long long)hp->head_dim_v,
                (long long)(qd > ad ? qd : ad), (long long)big);
    PI_TRY(get_int(r, "context_length", -1, 1, (int64_t)1 << 30, &hp->n_ctx_train));
    PI_TRY(get_int(r, "rope.dimension_count", hp->head_dim_k, 0, hp->head_dim_k, &hp->n_rot));
    if (hp->n_rot % 2)
        PI_FAIL(r->err, PI_ERR_FORMAT, "rope.dimension_count %lld is odd", (long long)hp->n_rot);
    if (hp->info->flags & PI_AF_POS_EMBD) /* learned positions: nothing rotates */
        hp->n_rot = 0;
    PI_TRY(get_arch_float(r, "rope.freq_base", 10000.0f, 1e-3f, 1e12f, &hp->rope_freq_base));
    const struct pi_arch_info *ai = hp->info;
    if (ai->norm == PI_NORM_LAYER)
        PI_TRY(get_arch_float(r, "attention.layer_norm_epsilon", 1e-5f, 0.0f, 1.0f,
                              &hp->norm_eps));
    else
        PI_TRY(get_arch_float(r, "attention.layer_norm_rms_epsilon", 1e-5f, 0.0f, 1.0f,
                              &hp->norm_eps));
    PI_TRY(read_rope_scaling(r, hp));
    PI_TRY(refuse_unsupported_keys(r));
    /* attention: the file's scale, else 1/sqrt(head dim) -- but Gemma 2 27B (46 layers)
     * and Gemma 3 27B (62 layers) scale by 1/sqrt(n_embd / n_head) (their
     * query_pre_attn_scalar, which the converter does not store) */
    float scale = 0.0f;
    PI_TRY(get_arch_float(r, "attention.scale", 0.0f, 0.0f, 1e6f, &scale));
    int64_t qpas = hp->head_dim_k;
    if ((hp->arch == PI_ARCH_GEMMA2 && hp->n_layer == 46) ||
        (hp->arch == PI_ARCH_GEMMA3 && hp->n_layer == 62))
        qpas = hp->n_embd / hp->n_head;
    hp->attn_scale = scale > 0.0f ? scale : 1.0f / sqrtf((float)qpas);
    PI_TRY(get_arch_float(r, "attn_logit_softcapping", 0.0f, 0.0f, 1e6f, &hp->attn_softcap));
    PI_TRY(get_arch_float(r, "final_logit_softcapping", 0.0f, 0.0f, 1e6f, &hp->final_softcap));
    /* a cap is 0 (none) or a scale: one that rounds to 0 as a float would turn it off */
    if ((hp->attn_softcap != 0.0f && hp->attn_softcap < 1e-3f) ||
        (hp->final_softcap != 0.0f && hp->final_softcap < 1e-3f))
        PI_FAIL(r->err, PI_ERR_FORMAT, "a logit soft-cap of this file is below 1e-3 (0 means "
                "none)");
    char ckey[128];
    snprintf(ckey, sizeof ckey, "%sattention.causal", r->prefix);
    const struct gguf_kv *causal = gguf_find_kv(r->f, ckey);
    int64_t cv = 1;
    if (causal && (gguf_kv_int(r->f, causal, 0, &cv) < 0 || cv != 1))
        PI_FAIL(r->err, PI_ERR_UNSUPPORTED, "metadata '%s' other than true (non-causal "
                "attention) is not supported", ckey);
    PI_TRY(get_int(r, "attention.sliding_window", 0, 0, (int64_t)1 << 30, &hp->n_swa));
    hp->embd_scale = ai->flags & PI_AF_EMBD_SCALE ? sqrtf((float)hp->n_embd) : 1.0f;
    hp->sparse_threshold = 0.0f;
    if (hp->sparse) {
        if (!(ai->flags & PI_AF_SPARSE))
            PI_FAIL(r->err, PI_ERR_UNSUPPORTED, "PowerInfer (PWRI) files of architecture '%s' "
                    "are not supported yet (llama, bamboo, falcon, opt are)", ai->name);
        PI_TRY(get_float(r, "powerinfer.sparse_threshold", 0.0f, -1e30f, 1e30f,
                         &hp->sparse_threshold));
    } else if (gguf_find_kv(r->f, "powerinfer.sparse_threshold")) {
        pi_log(lg, PI_LOG_WARN,
               "powerinfer.sparse_threshold is ignored: the file has the dense GGUF magic");
    }
    /* FFN activation: the architecture's; PowerInfer's sparse files run ReLU (ReLU-Llama,
     * ReluFalcon; Bamboo's relu(gate) * relu(up) is its own). Our own optional key
     * powerinfer.ffn_activation ("silu" or "relu") overrides it for llama. */
    hp->ffn_act = hp->sparse && ai->act != PI_FFN_RELU_BOTH ? PI_FFN_RELU : ai->act;
    const char *stype;
    uint64_t slen;
    int st = get_str(r, "powerinfer.ffn_activation", &stype, &slen);
    if (st == PI_OK && hp->arch == PI_ARCH_LLAMA) {
        if (slen == 4 && memcmp(stype, "silu", 4) == 0)
            hp->ffn_act = PI_FFN_SILU;
        else if (slen == 4 && memcmp(stype, "relu", 4) == 0)
            hp->ffn_act = PI_FFN_RELU;
        else
            PI_FAIL(r->err, PI_ERR_UNSUPPORTED, "powerinfer.ffn_activation '%.*s' is not "
                    "supported (silu, relu)", (int)(slen > 32 ? 32 : slen), stype);
    } else if (st == PI_OK) {
        PI_FAIL(r->err, PI_ERR_UNSUPPORTED, "powerinfer.ffn_activation is read for llama files "
                "only; a %s file's activation is its architecture's", ai->name);
    } else if (st != PI_ERR_NOT_FOUND) {
        return st;
    }
    if (hp->sparse && hp->ffn_act == PI_FFN_SILU)
        PI_FAIL(r->err, PI_ERR_FORMAT, "a sparse (PWRI) model needs a ReLU FFN, the file says "
                "silu");
    return read_sparsify(r, hp);
}

enum tensor_kind {
    K_NORM,   /* 1-D, F32/F16/BF16 */
    K_WEIGHT, /* 2-D, any computable type */
    K_VEC2,   /* 2-D, F32/F16/BF16: rows of biases (gpt-oss's experts') */
};

/* Find "name", check dims and type. Optional tensors give *out = NULL when absent. */
static int want(struct reader *r, const char *name, enum tensor_kind kind, int64_t ne0,
                int64_t ne1, int optional, const struct gguf_tensor **out) {
    *out = NULL;
    int64_t i = gguf_find_tensor(r->f, name);
    if (i < 0) {
        if (optional)
            return PI_OK;
        PI_FAIL(r->err, PI_ERR_FORMAT, "tensor '%s' is missing", name);
    }
    const struct gguf_tensor *t = &r->f->tensors[i];
    int n_dims = kind == K_NORM ? 1 : 2;
    int shape_ok = (int)t->n_dims == n_dims && t->ne[0] == ne0 &&
                   (kind == K_NORM || t->ne[1] == ne1);
    if (!shape_ok) {
        char got[96];
        if (t->n_dims == 1)
            snprintf(got, sizeof got, "{%lld}", (long long)t->ne[0]);
        else
            snprintf(got, sizeof got, "{%lld, %lld%s}", (long long)t->ne[0],
                     (long long)t->ne[1], t->n_dims > 2 ? ", ..." : "");
        if (kind == K_NORM)
            PI_FAIL(r->err, PI_ERR_FORMAT, "tensor '%s' has shape %s, expected {%lld}", name,
                    got, (long long)ne0);
        PI_FAIL(r->err, PI_ERR_FORMAT, "tensor '%s' has shape %s, expected {%lld, %lld}", name,
                got, (long long)ne0, (long long)ne1);
    }
    const struct pi_type_traits *tt = pi_type_traits(t->type);
    if (kind != K_WEIGHT && t->type != PI_TYPE_F32 && t->type != PI_TYPE_F16 &&
        t->type != PI_TYPE_BF16)
        PI_FAIL(r->err, PI_ERR_UNSUPPORTED, "tensor '%s' has type %s, expected F32, F16 or BF16",
                name, tt->name);
    if (!tt->to_float)
        PI_FAIL(r->err, PI_ERR_UNSUPPORTED,
                "tensor '%s' has type %s, which this build cannot compute with", name,
                tt->name);
    *out = t;
    return PI_OK;
}

/* A 3-D tensor of experts {ne0, ne1, ne2} (ne2 experts of ne1 rows), any computable
 * type; optional ones give *out = NULL when absent. */
static int want3(struct reader *r, const char *name, int64_t ne0, int64_t ne1, int64_t ne2,
                 int optional, const struct gguf_tensor **out) {
    *out = NULL;
    int64_t i = gguf_find_tensor(r->f, name);
    if (i < 0) {
        if (optional)
            return PI_OK;
        PI_FAIL(r->err, PI_ERR_FORMAT, "tensor '%s' is missing", name);
    }
    const struct gguf_tensor *t = &r->f->tensors[i];
    if (t->n_dims != 3 || t->ne[0] != ne0 || t->ne[1] != ne1 || t->ne[2] != ne2) {
        char got[96] = "{";
        for (uint32_t d = 0; d < t->n_dims && d < GGUF_MAX_DIMS; d++)
            snprintf(got + strlen(got), sizeof got - strlen(got), "%s%lld", d ? ", " : "",
                     (long long)t->ne[d]);
        PI_FAIL(r->err, PI_ERR_FORMAT, "tensor '%s' has shape %s}, expected {%lld, %lld, %lld} "
                "(n_embd or an expert's width, by the expert count)", name, got,
                (long long)ne0, (long long)ne1, (long long)ne2);
    }
    const struct pi_type_traits *tt = pi_type_traits(t->type);
    if (!tt->to_float)
        PI_FAIL(r->err, PI_ERR_UNSUPPORTED,
                "tensor '%s' has type %s, which this build cannot compute with", name,
                tt->name);
    *out = t;
    return PI_OK;
}

/* A norm: "<base>.weight" [n_embd] (required unless optional), and for LayerNorm its
 * optional "<base>.bias". */
static int want_norm(struct reader *r, const struct pi_hparams *hp, const char *base,
                     int64_t n, int optional, struct pi_norm_desc *out) {
    char n1[GGUF_MAX_NAME + 32];
    snprintf(n1, sizeof n1, "%s.weight", base);
    PI_TRY(want(r, n1, K_NORM, n, 0, optional, &out->w));
    out->b = NULL;
    if (out->w && hp->info->norm == PI_NORM_LAYER) {
        snprintf(n1, sizeof n1, "%s.bias", base);
        PI_TRY(want(r, n1, K_NORM, n, 0, 1, &out->b));
    }
    return PI_OK;
}

/* The FFN of a mixture-of-experts layer: router, experts (gate and up separate or
 * fused), and a shared expert with its optional gate. */
static int build_moe(struct reader *r, const struct pi_hparams *hp, int64_t il,
                     struct pi_layer_desc *L) {
    char n[GGUF_MAX_NAME + 32];
    const int64_t E = hp->n_embd, X = hp->n_expert, Fe = hp->n_ff_exp, Fs = hp->n_ff_shexp;
#define NAME(s) (snprintf(n, sizeof n, "blk.%lld." s ".weight", (long long)il), n)
#define BIAS(s) (snprintf(n, sizeof n, "blk.%lld." s ".bias", (long long)il), n)
    PI_TRY(want(r, NAME("ffn_gate_inp"), K_WEIGHT, E, X, 0, &L->router));
    /* gpt-oss: biases of the router and of every expert's gate, up and down (required,
     * as llama.cpp requires them; in other architectures' files they go unread, which
     * check_tensors refuses) */
    if (hp->info->flags & PI_AF_MOE_BIASES) {
        PI_TRY(want(r, BIAS("ffn_gate_inp"), K_NORM, X, 0, 0, &L->router_b));
        PI_TRY(want(r, BIAS("ffn_gate_exps"), K_VEC2, Fe, X, 0, &L->b_gate_exps));
        PI_TRY(want(r, BIAS("ffn_up_exps"), K_VEC2, Fe, X, 0, &L->b_up_exps));
        PI_TRY(want(r, BIAS("ffn_down_exps"), K_VEC2, E, X, 0, &L->b_down_exps));
        if (gguf_find_tensor(r->f, NAME("ffn_gate_up_exps")) >= 0)
            PI_FAIL(r->err, PI_ERR_UNSUPPORTED, "tensor '%s': fused gate_up experts in a %s "
                    "file (its expert biases are per gate and up) are not supported", n,
                    hp->info->name);
    }
    if (gguf_find_tensor(r->f, NAME("ffn_gate_up_exps")) >= 0) {
        PI_TRY(want3(r, NAME("ffn_gate_up_exps"), E, 2 * Fe, X, 0, &L->gate_up_exps));
    } else {
        PI_TRY(want3(r, NAME("ffn_gate_exps"), E, Fe, X, 0, &L->gate_exps));
        PI_TRY(want3(r, NAME("ffn_up_exps"), E, Fe, X, 0, &L->up_exps));
    }
    if (hp->sparsified) { /* pi_model_sparsify's: each expert's down transposed */
        if (gguf_find_tensor(r->f, NAME("ffn_down_exps")) >= 0)
            PI_FAIL(r->err, PI_ERR_FORMAT, "sparsified file has '%s'; it stores the experts' "
                    "down projections transposed as ffn_down_exps_t", n);
        if (L->b_down_exps)
            PI_FAIL(r->err, PI_ERR_UNSUPPORTED, "layer %lld of this sparsified file has "
                    "expert biases, which the thresholded experts do not run", (long long)il);
        PI_TRY(want3(r, NAME("ffn_down_exps_t"), E, Fe, X, 0, &L->down_exps_t));
    } else {
        PI_TRY(want3(r, NAME("ffn_down_exps"), Fe, E, X, 0, &L->down_exps));
    }
    if (gguf_find_tensor(r->f, NAME("ffn_up_shexp")) >= 0) {
        PI_TRY(want(r, NAME("ffn_gate_shexp"), K_WEIGHT, E, Fs, 0, &L->gate_shexp));
        PI_TRY(want(r, NAME("ffn_up_shexp"), K_WEIGHT, E, Fs, 0, &L->up_shexp));
        PI_TRY(want(r, NAME("ffn_down_shexp"), K_WEIGHT, Fs, E, 0, &L->down_shexp));
        const int64_t gi = gguf_find_tensor(r->f, NAME("ffn_gate_inp_shexp"));
        if (gi >= 0 && r->f->tensors[gi].n_dims == 1)
            PI_TRY(want(r, n, K_NORM, E, 0, 0, &L->gate_inp_shexp));
        else if (gi >= 0)
            PI_TRY(want(r, n, K_WEIGHT, E, 1, 0, &L->gate_inp_shexp));
    }
#undef NAME
#undef BIAS
    return PI_OK;
}

/* Layer il's predictor, score = fc2 . relu(fc1 . h): fc1 {n_embd, rank}, fc2 {rank, n_ff},
 * the rank per layer (PowerInfer's layout; required in PWRI files, optional in sparsified
 * ones, where tools/train_predictor.py adds them). */
static int want_predictor(struct reader *r, const struct pi_hparams *hp, int64_t il,
                          struct pi_layer_desc *L) {
    char n[64];
    snprintf(n, sizeof n, "blk.%lld.fc1.weight", (long long)il);
    int64_t fi = gguf_find_tensor(r->f, n);
    if (fi < 0)
        PI_FAIL(r->err, PI_ERR_FORMAT, "%s lacks the predictor tensor '%s'",
                hp->sparse ? "sparse (PWRI) model" : "sparsified file", n);
    const struct gguf_tensor *fc1 = &r->f->tensors[fi];
    int64_t rank = fc1->n_dims == 2 ? fc1->ne[1] : 0;
    if (rank < 1)
        PI_FAIL(r->err, PI_ERR_FORMAT, "predictor tensor '%s' must have shape {%lld, rank}", n,
                (long long)hp->n_embd);
    if (rank > PI_MAX_WIDTH)
        PI_FAIL(r->err, PI_ERR_FORMAT, "predictor tensor '%s' has rank %lld, above the limit "
                "of %lld", n, (long long)rank, (long long)PI_MAX_WIDTH);
    PI_TRY(want(r, n, K_WEIGHT, hp->n_embd, rank, 0, &L->fc1));
    snprintf(n, sizeof n, "blk.%lld.fc2.weight", (long long)il);
    PI_TRY(want(r, n, K_WEIGHT, rank, hp->n_ff, 0, &L->fc2));
    L->pred_rank = rank;
    return PI_OK;
}

static int build_layer(struct reader *r, const struct pi_hparams *hp, int64_t il,
                       struct pi_layer_desc *L) {
    char n[GGUF_MAX_NAME + 32], base[64];
    const int64_t E = hp->n_embd, F = hp->n_ff;
    const int64_t q = hp->n_head * hp->head_dim_k, k = hp->n_head_kv * hp->head_dim_k;
    const int64_t v = hp->n_head_kv * hp->head_dim_v, o = hp->n_head * hp->head_dim_v;
    const unsigned flags = hp->info->flags;
#define NAME(s) (snprintf(n, sizeof n, "blk.%lld." s ".weight", (long long)il), n)
#define BIAS(s) (snprintf(n, sizeof n, "blk.%lld." s ".bias", (long long)il), n)
#define BASE(s) (snprintf(base, sizeof base, "blk.%lld." s, (long long)il), base)
    /* norms: sequential blocks attn_norm and ffn_norm; parallel ones attn_norm for both,
     * or (Falcon 40B) attn_norm_2 for attention and attn_norm for the FFN */
    if (flags & PI_AF_PARALLEL) {
        struct pi_norm_desc n2;
        PI_TRY(want_norm(r, hp, BASE("attn_norm_2"), E, 1, &n2));
        if (n2.w) {
            L->norm_attn = n2;
            PI_TRY(want_norm(r, hp, BASE("attn_norm"), E, 0, &L->norm_ffn));
        } else {
            PI_TRY(want_norm(r, hp, BASE("attn_norm"), E, 0, &L->norm_attn));
        }
    } else {
        /* gpt-oss names the FFN's input norm post_attention_norm (HF's
         * post_attention_layernorm; llama.cpp's ATTN_POST_NORM) */
        PI_TRY(want_norm(r, hp, BASE("attn_norm"), E, 0, &L->norm_attn));
        if (flags & PI_AF_FFN_NORM_POST_ATTN)
            PI_TRY(want_norm(r, hp, BASE("post_attention_norm"), E, 0, &L->norm_ffn));
        else
            PI_TRY(want_norm(r, hp, BASE("ffn_norm"), E, 0, &L->norm_ffn));
    }
    /* attention: q, k, v separate or fused, each with an optional bias */
    if (gguf_find_tensor(r->f, NAME("attn_qkv")) >= 0) {
        PI_TRY(want(r, NAME("attn_qkv"), K_WEIGHT, E, q + k + v, 0, &L->wqkv));
        PI_TRY(want(r, BIAS("attn_qkv"), K_NORM, q + k + v, 0, 1, &L->bqkv));
    } else {
        PI_TRY(want(r, NAME("attn_q"), K_WEIGHT, E, q, 0, &L->wq));
        PI_TRY(want(r, NAME("attn_k"), K_WEIGHT, E, k, 0, &L->wk));
        PI_TRY(want(r, NAME("attn_v"), K_WEIGHT, E, v, 0, &L->wv));
        PI_TRY(want(r, BIAS("attn_q"), K_NORM, q, 0, 1, &L->bq));
        PI_TRY(want(r, BIAS("attn_k"), K_NORM, k, 0, 1, &L->bk));
        PI_TRY(want(r, BIAS("attn_v"), K_NORM, v, 0, 1, &L->bv));
    }
    /* q/k norms per head ({head_dim}), or over the whole q / k row (OLMoE) */
    const int64_t qi = gguf_find_tensor(r->f, NAME("attn_q_norm"));
    const int64_t ki = gguf_find_tensor(r->f, NAME("attn_k_norm"));
    const int64_t qn = qi >= 0 && r->f->tensors[qi].ne[0] == q ? q : hp->head_dim_k;
    const int64_t kn = ki >= 0 && r->f->tensors[ki].ne[0] == k ? k : hp->head_dim_k;
    PI_TRY(want(r, NAME("attn_q_norm"), K_NORM, qn, 0, 1, &L->q_norm));
    PI_TRY(want(r, NAME("attn_k_norm"), K_NORM, kn, 0, 1, &L->k_norm));
    PI_TRY(want(r, NAME("attn_output"), K_WEIGHT, o, E, 0, &L->wo));
    PI_TRY(want(r, BIAS("attn_output"), K_NORM, E, 0, 1, &L->bo));
    if (!(flags & PI_AF_FFN_NORM_POST_ATTN))
        PI_TRY(want(r, NAME("post_attention_norm"), K_NORM, E, 0, 1, &L->attn_post_norm));
    /* attention sinks: one logit per query head, in every layer of the architectures
     * that have them (elsewhere the tensor goes unread, which check_tensors refuses) */
    if (flags & PI_AF_SINKS)
        PI_TRY(want(r, NAME("attn_sinks"), K_NORM, hp->n_head, 0, 0, &L->attn_sinks));
    if (L->attn_sinks && hp->attn_softcap > 0.0f)
        PI_FAIL(r->err, PI_ERR_UNSUPPORTED, "layer %lld has attention sinks and the file sets "
                "attn_logit_softcapping: whether the sink is capped is not defined",
                (long long)il);
    if ((flags & PI_AF_MOE_BIASES) && gguf_find_tensor(r->f, NAME("ffn_gate_inp")) < 0)
        PI_FAIL(r->err, PI_ERR_FORMAT, "tensor '%s' is missing (every %s layer is a "
                "mixture-of-experts layer)", n, hp->info->name);
    if (gguf_find_tensor(r->f, NAME("ffn_gate_inp")) >= 0)
        return build_moe(r, hp, il, L);
    /* FFN: gated with gate and up, gated with up holding both (Phi-3), or plain */
    if (flags & PI_AF_GATED) {
        const int has_gate = gguf_find_tensor(r->f, NAME("ffn_gate")) >= 0;
        const int64_t ui = gguf_find_tensor(r->f, NAME("ffn_up"));
        /* no gate and an up that is not {E, F}: a fused one, checked as {E, 2F} */
        L->up_fused = !has_gate && !hp->sparse && ui >= 0 &&
                      !(r->f->tensors[ui].n_dims == 2 && r->f->tensors[ui].ne[1] == F);
        if (!L->up_fused)
            PI_TRY(want(r, NAME("ffn_gate"), K_WEIGHT, E, F, 0, &L->ffn_gate));
    }
    PI_TRY(want(r, NAME("ffn_up"), K_WEIGHT, E, L->up_fused ? 2 * F : F, 0, &L->ffn_up));
    if (L->ffn_gate)
        PI_TRY(want(r, BIAS("ffn_gate"), K_NORM, F, 0, 1, &L->b_gate));
    PI_TRY(want(r, BIAS("ffn_up"), K_NORM, L->up_fused ? 2 * F : F, 0, 1, &L->b_up));
    PI_TRY(want(r, NAME("post_ffw_norm"), K_NORM, E, 0, 1, &L->ffn_post_norm));
    if (hp->sparsified) { /* pi_model_sparsify's file: ffn_down_t, no predictors */
        /* gated with a separate gate (and its biases, if any), or plain (act(up x + b_up)) */
        if ((flags & PI_AF_GATED) && !L->ffn_gate)
            PI_FAIL(r->err, PI_ERR_UNSUPPORTED, "layer %lld of this sparsified file has a fused "
                    "gate_up, which the thresholded FFN does not run (pi_model_sparsify "
                    "writes ffn_gate and ffn_up)", (long long)il);
        PI_TRY(want(r, BIAS("ffn_down"), K_NORM, E, 0, 1, &L->b_down));
        /* ffn_down beside it (pi_sparsify_params.keep_down): the prompts' gemm */
        PI_TRY(want(r, NAME("ffn_down"), K_WEIGHT, F, E, 1, &L->ffn_down));
        PI_TRY(want(r, NAME("ffn_down_t"), K_WEIGHT, E, F, 0, &L->ffn_down_t));
        /* trained predictors: in every layer or in none (checked by the caller) */
        if (gguf_find_tensor(r->f, NAME("fc1")) < 0 && gguf_find_tensor(r->f, NAME("fc2")) < 0)
            return PI_OK;
        return want_predictor(r, hp, il, L);
    }
    if (!hp->sparse) {
        PI_TRY(want(r, NAME("ffn_down"), K_WEIGHT, F, E, 0, &L->ffn_down));
        PI_TRY(want(r, BIAS("ffn_down"), K_NORM, E, 0, 1, &L->b_down));
        return PI_OK;
    }
    /* PowerInfer layout: down stored transposed (one row per neuron), predictor
     * fc2 . relu(fc1 . h) with a per-layer rank; OPT's biases: up's [n_ff] and down's
     * [n_embd], which PowerInfer names ffn_down_t.bias. */
    if (L->b_gate || (L->ffn_gate && L->b_up) || L->ffn_post_norm)
        PI_FAIL(r->err, PI_ERR_UNSUPPORTED, "layer %lld of this sparse (PWRI) file has gate or "
                "up biases beside a gate, or a post-FFN norm, which the sparse FFN does not "
                "apply yet", (long long)il);
    if (gguf_find_tensor(r->f, BIAS("ffn_down")) >= 0)
        PI_FAIL(r->err, PI_ERR_FORMAT, "sparse (PWRI) model has '%s'; PowerInfer files name "
                "the down projection's bias ffn_down_t.bias", n);
    PI_TRY(want(r, BIAS("ffn_down_t"), K_NORM, E, 0, 1, &L->b_down));
    if (gguf_find_tensor(r->f, NAME("ffn_down")) >= 0)
        PI_FAIL(r->err, PI_ERR_FORMAT, "sparse (PWRI) model has '%s'; PowerInfer files store "
                "the down projection transposed as ffn_down_t", n);
    PI_TRY(want(r, NAME("ffn_down_t"), K_WEIGHT, E, F, 0, &L->ffn_down_t));
#undef NAME
#undef BIAS
#undef BASE
    return want_predictor(r, hp, il, L);
}

/* Which layers attend within the sliding window, and each layer's RoPE base and
 * scale: attention.sliding_window_pattern when the file has it (one bool per layer,
 * true = local; or a period N: every N-th layer global), else the architecture's
 * period. Local layers of interleaved architectures take rope.freq_base_swa (or the
 * architecture's local base) and no linear scaling. */
static int resolve_layers(struct reader *r, struct pi_model_desc *d) {
    const struct pi_hparams *hp = &d->hp;
    const struct pi_arch_info *ai = hp->info;
    char key[128];
    snprintf(key, sizeof key, "%sattention.sliding_window_pattern", r->prefix);
    const struct gguf_kv *pat = gguf_find_kv(r->f, key);
    int64_t period = ai->swa_period;
    if (pat && pat->type == PI_META_ARRAY) {
        if (pat->n != (uint64_t)hp->n_layer ||
            (pat->elem_type != PI_META_BOOL && pat->elem_type != PI_META_U8 &&
             pat->elem_type != PI_META_I8 && pat->elem_type != PI_META_U32 &&
             pat->elem_type != PI_META_I32))
            PI_FAIL(r->err, PI_ERR_FORMAT, "metadata '%s' must be an array of %lld booleans",
                    key, (long long)hp->n_layer);
    } else if (pat) {
        PI_TRY(get_int(r, "attention.sliding_window_pattern", 0, 0, PI_MAX_LAYERS, &period));
        pat = NULL;
    }
    float swa_base = ai->swa_rope_base > 0.0f ? ai->swa_rope_base : hp->rope_freq_base;
    PI_TRY(get_arch_float(r, "rope.freq_base_swa", swa_base, 1e-3f, 1e12f, &swa_base));
    const int interleaved = pat || period > 0;
    char bkey[128];
    snprintf(bkey, sizeof bkey, "%srope.freq_base_swa", r->prefix);
    if (!interleaved && gguf_find_kv(r->f, bkey) && swa_base != hp->rope_freq_base)
        PI_FAIL(r->err, PI_ERR_UNSUPPORTED, "metadata '%s' gives local layers their own RoPE "
                "base, but this %s file does not say which layers are local "
                "(attention.sliding_window_pattern)", bkey, ai->name);
    for (int64_t l = 0; l < hp->n_layer; l++) {
        struct pi_layer_desc *L = &d->layers[l];
        int local = hp->n_swa > 0;
        if (pat) {
            int64_t b = 0;
            PI_TRY(gguf_kv_int(r->f, pat, (uint64_t)l, &b));
            if (b != 0 && b != 1)
                PI_FAIL(r->err, PI_ERR_FORMAT, "metadata '%s'[%lld] = %lld: want 0 (global) "
                        "or 1 (local)", key, (long long)l, (long long)b);
            local = local && b != 0;
        } else if (period > 0) {
            local = local && (l + 1) % period != 0;
        }
        L->window = local ? hp->n_swa : 0;
        L->rope_base = local && interleaved ? swa_base : hp->rope_freq_base;
        L->rope_scale = local && interleaved && !(ai->flags & PI_AF_SWA_KEEP_SCALE)
                            ? 1.0f
                            : hp->rope_scale;
    }
    return PI_OK;
}

static int match(const char *s, uint64_t len, const char *lit) {
    return len == strlen(lit) && memcmp(s, lit, len) == 0;
}

static int ends_with(const char *s, const char *suffix) {
    const size_t n = strlen(s), m = strlen(suffix);
    return n >= m && memcmp(s + n - m, suffix, m) == 0;
}

/* "blk.<layer>.<part>": the layer and a pointer to part, or NULL for other names. */
static const char *layer_part(const char *name, int64_t *layer) {
    if (strncmp(name, "blk.", 4) != 0 || name[4] < '0' || name[4] > '9')
        return NULL;
    int64_t l = 0;
    const char *p = name + 4;
    for (; *p >= '0' && *p <= '9'; p++)
        l = l < ((int64_t)1 << 40) ? l * 10 + (*p - '0') : l; /* saturates, far past any layer */
    if (*p != '.')
        return NULL;
    *layer = l;
    return p + 1;
}

/* Whether "blk.N.<part>" names a mixture-of-experts tensor. */
static int is_moe_part(const char *part) {
    return strncmp(part, "ffn_gate_inp", 12) == 0 || strstr(part, "_exps") ||
           strstr(part, "_shexp") || strncmp(part, "exp_probs", 9) == 0;
}

/* Mixture-of-experts hyper-parameters (Mixtral and its kin carry arch "llama"):
 * <arch>.expert_count > 0 makes a file one. A file without it may have no expert
 * tensor, and one of an architecture without experts is named for what it is. */
static int read_moe(struct reader *r, struct pi_hparams *hp) {
    const int64_t big = PI_MAX_WIDTH;
    PI_TRY(get_int(r, "expert_count", 0, 0, PI_MAX_EXPERTS, &hp->n_expert));
    if (hp->n_expert == 0) {
        for (uint64_t i = 0; i < r->f->n_tensors; i++) {
            const char *name = r->f->tensors[i].name;
            int64_t l;
            const char *part = layer_part(name, &l);
            if (part && is_moe_part(part))
                PI_FAIL(r->err, PI_ERR_FORMAT, "tensor '%s' belongs to a mixture-of-experts "
                        "layer, but the file has no %sexpert_count", name, r->prefix);
        }
        return PI_OK;
    }
    if (!(hp->info->flags & PI_AF_MOE))
        PI_FAIL(r->err, PI_ERR_UNSUPPORTED, "mixture-of-experts files of architecture '%s' "
                "(%sexpert_count = %lld) are not supported (llama/Mixtral, qwen2moe, qwen3moe, "
                "olmoe, gpt-oss are)", hp->info->name, r->prefix, (long long)hp->n_expert);
    if (hp->sparse)
        PI_FAIL(r->err, PI_ERR_UNSUPPORTED, "PowerInfer (PWRI) files with experts are not "
                "supported");
    PI_TRY(get_int(r, "expert_used_count", -1, 1, hp->n_expert, &hp->n_expert_used));
    PI_TRY(get_int(r, "expert_feed_forward_length", hp->n_ff, 1, big, &hp->n_ff_exp));
    PI_TRY(get_int(r, "expert_shared_feed_forward_length", hp->n_ff_exp, 1, big,
                   &hp->n_ff_shexp));
    int64_t groups;
    PI_TRY(get_int(r, "expert_group_count", 1, 0, hp->n_expert, &groups));
    if (groups > 1)
        PI_FAIL(r->err, PI_ERR_UNSUPPORTED, "metadata '%sexpert_group_count' = %lld: grouped "
                "expert routing (DeepSeek-V3) is not supported", r->prefix, (long long)groups);
    int64_t gating;
    const int64_t fixed = (int64_t)hp->info->moe_gating_fixed;
    PI_TRY(get_int(r, "expert_gating_func", fixed ? fixed : PI_GATING_SOFTMAX, 0, 255, &gating));
    if (fixed && gating != fixed)
        PI_FAIL(r->err, PI_ERR_UNSUPPORTED, "metadata '%sexpert_gating_func' = %lld: %s routers "
                "gate by %lld (the top k of the logits, then softmax over them)", r->prefix,
                (long long)gating, hp->info->name, (long long)fixed);
    if (gating != PI_GATING_SOFTMAX && gating != PI_GATING_SIGMOID &&
        gating != PI_GATING_SQRT_SOFTPLUS && !(fixed && gating == fixed))
        PI_FAIL(r->err, PI_ERR_UNSUPPORTED, "metadata '%sexpert_gating_func' = %lld is not "
                "supported (1 softmax, 2 sigmoid, 4 sqrt-softplus are; 3, softmax over the "
                "top k, for gpt-oss)", r->prefix, (long long)gating);
    hp->moe_gating = (enum pi_moe_gating)gating;
    char key[128];
    snprintf(key, sizeof key, "%sexpert_weights_norm", r->prefix);
    const struct gguf_kv *kv = gguf_find_kv(r->f, key);
    hp->moe_norm = hp->info->moe_norm_default;
    if (kv) {
        int64_t v;
        if (kv->type != PI_META_BOOL || gguf_kv_int(r->f, kv, 0, &v) < 0)
            PI_FAIL(r->err, PI_ERR_FORMAT, "metadata '%s' must be a boolean", key);
        hp->moe_norm = v != 0;
    }
    PI_TRY(get_arch_float(r, "expert_weights_scale", 1.0f, 0.0f, 1e6f, &hp->moe_scale));
    if (hp->moe_scale == 0.0f) /* llama.cpp's "none" */
        hp->moe_scale = 1.0f;
    return PI_OK;
}

/* Tensors a file may carry that the forward pass does not read, because leaving them
 * out changes nothing it computes (docs/formats.md, "Tensors that may go unused"). */
static const char *const may_go_unused[] = {
    /* the rotary inverse frequencies base^(-2i/n_rot) some converters copied from
     * PyTorch checkpoints: they follow from rope.freq_base and rope.dimension_count,
     * and llama.cpp ignores them too */
    "attn_rot_embd.weight",
    NULL,
};

/* PI_OK if the unread tensor `name` may go unused, else PI_ERR_UNSUPPORTED saying what
 * it would have computed. */
static int check_unused(const struct reader *r, const struct pi_hparams *hp, const char *name) {
    int64_t l;
    const char *part = layer_part(name, &l);
    if (part)
        for (const char *const *k = may_go_unused; *k; k++)
            if (strcmp(part, *k) == 0)
                return PI_OK;
    if (ends_with(name, ".bias"))
        PI_FAIL(r->err, PI_ERR_UNSUPPORTED, "tensor '%s' is a bias, which the %s forward "
                "pass does not add yet", name, pi_arch_name(hp->arch));
    if (part && l >= hp->n_layer)
        PI_FAIL(r->err, PI_ERR_UNSUPPORTED, "tensor '%s' belongs to layer %lld, but the model "
                "has %lld layers (%sblock_count)", name, (long long)l, (long long)hp->n_layer,
                r->prefix);
    if (part && !hp->sparse &&
        (!strcmp(part, "fc1.weight") || !strcmp(part, "fc2.weight") ||
         !strcmp(part, "ffn_down_t.weight")))
        PI_FAIL(r->err, PI_ERR_UNSUPPORTED, "tensor '%s' belongs to a PowerInfer (PWRI) file, "
                "but this file has the dense GGUF magic", name);
    PI_FAIL(r->err, PI_ERR_UNSUPPORTED, "tensor '%s' is not read by the %s forward pass, so "
            "the model would compute something else than the file describes (docs/formats.md "
            "lists the tensors that may go unused)", name, pi_arch_name(hp->arch));
}

static void mark(uint8_t *used, const struct gguf_file *f, const struct gguf_tensor *t) {
    if (t)
        used[t - f->tensors] = 1;
}

/* Every tensor of the file is read by the description or may go unused; and the
 * widths that size a context's scratch. */
static int check_tensors(struct reader *r, struct pi_model_desc *d, const struct pi_allocator *a) {
    const struct gguf_file *f = r->f;
    const struct pi_hparams *hp = &d->hp;
    d->max_rank = 0;
    for (int64_t l = 0; l < hp->n_layer; l++)
        d->max_rank = d->layers[l].pred_rank > d->max_rank ? d->layers[l].pred_rank : d->max_rank;
    d->n_moe_layers = 0;
    for (int64_t l = 0; l < hp->n_layer; l++)
        d->n_moe_layers += d->layers[l].router != NULL;
    d->max_ff = hp->n_ff;
    if (d->n_moe_layers) {
        d->max_ff = hp->n_ff_exp > d->max_ff ? hp->n_ff_exp : d->max_ff;
        d->max_ff = hp->n_ff_shexp > d->max_ff ? hp->n_ff_shexp : d->max_ff;
    }
    const int64_t w[] = {hp->n_embd,
                         d->max_ff,
                         hp->n_expert,
                         hp->n_head * hp->head_dim_k,
                         hp->n_head_kv * hp->head_dim_k,
                         hp->n_head_kv * hp->head_dim_v,
                         hp->n_head * hp->head_dim_v,
                         d->max_rank};
    d->max_width = 1;
    for (size_t i = 0; i < sizeof w / sizeof *w; i++)
        d->max_width = w[i] > d->max_width ? w[i] : d->max_width;

    uint8_t *used = pi_calloc(a, (size_t)f->n_tensors + 1, 1);
    if (!used)
        PI_FAIL(r->err, PI_ERR_NOMEM, "out of memory");
    const struct gguf_tensor *top[] = {d->token_embd,   d->output_norm.w, d->output_norm.b,
                                       d->output,       d->rope_freqs,    d->rope_long,
                                       d->rope_short,   d->pos_embd};
    for (size_t i = 0; i < sizeof top / sizeof *top; i++)
        mark(used, f, top[i]);
    for (int64_t l = 0; l < hp->n_layer; l++) {
        const struct pi_layer_desc *L = &d->layers[l];
        const struct gguf_tensor *ts[] = {
            L->norm_attn.w, L->norm_attn.b, L->wq,       L->wk,         L->wv,
            L->wqkv,        L->bq,          L->bk,       L->bv,         L->bqkv,
            L->q_norm,      L->k_norm,      L->wo,       L->bo,         L->attn_post_norm,
            L->norm_ffn.w,  L->norm_ffn.b,  L->ffn_gate, L->ffn_up,     L->ffn_down,
            L->ffn_down_t,  L->b_gate,      L->b_up,     L->b_down,     L->ffn_post_norm,
            L->fc1,         L->fc2,         L->router,   L->gate_exps,  L->up_exps,
            L->gate_up_exps, L->down_exps,  L->down_exps_t, L->gate_shexp, L->up_shexp, L->down_shexp,
            L->gate_inp_shexp, L->attn_sinks,  L->router_b, L->b_gate_exps, L->b_up_exps,
            L->b_down_exps};
        for (size_t i = 0; i < sizeof ts / sizeof *ts; i++)
            mark(used, f, ts[i]);
    }
    int st = PI_OK;
    for (uint64_t i = 0; st == PI_OK && i < f->n_tensors; i++)
        if (!used[i])
            st = check_unused(r, hp, f->tensors[i].name);
    pi_free(a, used);
    return st;
}

int pi_model_desc_build(struct pi_model_desc *d, const struct gguf_file *f,
                        const struct pi_allocator *a, const struct pi_logger *lg,
                        int (*progress)(void *user, float frac), void *progress_user,
                        struct pi_error *err) {
    memset(d, 0, sizeof *d);
    struct reader r = {f, "", err};
    const char *arch;
    uint64_t alen;
    int st = get_str(&r, "general.architecture", &arch, &alen);
    if (st == PI_ERR_NOT_FOUND)
        PI_FAIL(err, PI_ERR_FORMAT, "metadata 'general.architecture' is missing");
    PI_TRY(st);
    struct pi_hparams *hp = &d->hp;
    hp->info = pi_arch_find(arch, alen);
    if (hp->info) {
        hp->arch = hp->info->arch;
    } else {
        int known = 0;
        for (const char *const *k = known_unsupported; *k; k++)
            known |= match(arch, alen, *k);
        /* shown as far as 40 bytes, control bytes and NUL as '?' (a NUL would end it
         * early: "llama\0x" is not llama, and must not read as if it were) */
        char shown[41];
        size_t n = alen > 40 ? 40 : (size_t)alen;
        for (size_t i = 0; i < n; i++)
            shown[i] = (unsigned char)arch[i] < 0x20 || arch[i] == 0x7f ? '?' : arch[i];
        shown[n] = 0;
        PI_FAIL(err, PI_ERR_UNSUPPORTED, "%s architecture '%s' is not supported (llama, "
                "bamboo, qwen2, qwen3, qwen2moe, qwen3moe, olmoe, gpt-oss, gemma2, gemma3, phi3, "
                "starcoder2, falcon, opt are)",
                known ? "the" : "unknown", shown);
    }
    hp->sparse = f->magic == GGUF_MAGIC_PWRI;
    snprintf(r.prefix, sizeof r.prefix, "%s.", pi_arch_name(hp->arch));
    PI_TRY(read_hparams(&r, hp, lg));
    PI_TRY(read_moe(&r, hp));
    d->sparsify_thresholds =
        hp->sparsified ? gguf_find_kv(f, "powerinfer.sparsify.thresholds") : NULL;

    int64_t ti = gguf_find_tensor(f, "token_embd.weight");
    if (ti < 0)
        PI_FAIL(err, PI_ERR_FORMAT, "tensor 'token_embd.weight' is missing");
    hp->n_vocab = f->tensors[ti].n_dims == 2 ? f->tensors[ti].ne[1] : 0;
    PI_TRY(want(&r, "token_embd.weight", K_WEIGHT, hp->n_embd, hp->n_vocab, 0,
                &d->token_embd));
    if (hp->n_vocab < 1)
        PI_FAIL(err, PI_ERR_FORMAT, "tensor 'token_embd.weight' has no rows");
    if (hp->n_vocab > INT32_MAX)
        PI_FAIL(err, PI_ERR_FORMAT, "tensor 'token_embd.weight' has %lld rows, more than "
                "token ids (int32_t) can name", (long long)hp->n_vocab);
    const struct gguf_kv *tok = gguf_find_kv(f, "tokenizer.ggml.tokens");
    if (tok && (tok->type != PI_META_ARRAY || tok->elem_type != PI_META_STRING))
        PI_FAIL(err, PI_ERR_FORMAT, "metadata 'tokenizer.ggml.tokens' must be an array of "
                "strings");
    if (tok && tok->n != (uint64_t)hp->n_vocab)
        PI_FAIL(err, PI_ERR_FORMAT, "the tokenizer has %llu tokens but token_embd.weight has "
                "%lld rows", (unsigned long long)tok->n, (long long)hp->n_vocab);
    PI_TRY(want_norm(&r, hp, "output_norm", hp->n_embd, 0, &d->output_norm));
    /* RoPE frequency factors: Llama 3.1's rope_freqs, Phi-3's LongRoPE pair */
    const int64_t half = hp->n_rot / 2 > 0 ? hp->n_rot / 2 : 1;
    PI_TRY(want(&r, "rope_freqs.weight", K_NORM, half, 0, 1, &d->rope_freqs));
    if (hp->rope_scaling == PI_ROPE_LONGROPE) {
        PI_TRY(want(&r, "rope_factors_long.weight", K_NORM, half, 0, 0, &d->rope_long));
        PI_TRY(want(&r, "rope_factors_short.weight", K_NORM, half, 0, 0, &d->rope_short));
    }
    if (d->rope_freqs && hp->rope_scaling == PI_ROPE_LONGROPE)
        PI_FAIL(err, PI_ERR_UNSUPPORTED, "tensor 'rope_freqs.weight' and LongRoPE's factors in "
                "one file: which RoPE factors apply is not defined");
    const struct gguf_tensor *factors[] = {d->rope_freqs, d->rope_long, d->rope_short};
    for (size_t i = 0; i < 3; i++) {
        if (!factors[i])
            continue;
        if (factors[i]->type != PI_TYPE_F32)
            PI_FAIL(err, PI_ERR_UNSUPPORTED, "tensor '%s' has type %s, expected F32",
                    factors[i]->name, pi_type_traits(factors[i]->type)->name);
        for (int64_t k = 0; k < factors[i]->ne[0]; k++) { /* divisors of the angles */
            float v;
            memcpy(&v, factors[i]->data + 4 * k, 4);
            if (!(v > 0.0f) || !isfinite(v))
                PI_FAIL(err, PI_ERR_FORMAT, "tensor '%s' value %lld is %g; RoPE factors must "
                        "be finite and positive", factors[i]->name, (long long)k, (double)v);
        }
    }
    PI_TRY(want(&r, "output.weight", K_WEIGHT, hp->n_embd, hp->n_vocab, 1, &d->output));
    if (hp->info->flags & PI_AF_POS_EMBD) {
        /* rows PI_POS_EMBD_OFFSET.. are positions 0..: the usable context is the rows
         * past the offset, and no more than the file's context_length */
        const int64_t pi = gguf_find_tensor(f, "position_embd.weight");
        const int64_t rows = pi >= 0 && f->tensors[pi].n_dims == 2 ? f->tensors[pi].ne[1] : 0;
        if (rows <= PI_POS_EMBD_OFFSET)
            PI_FAIL(err, PI_ERR_FORMAT, "tensor 'position_embd.weight' must have shape "
                    "{%lld, n_pos} with n_pos > %d (%s's learned positions)",
                    (long long)hp->n_embd, PI_POS_EMBD_OFFSET, hp->info->name);
        PI_TRY(want(&r, "position_embd.weight", K_WEIGHT, hp->n_embd, rows, 0, &d->pos_embd));
        if (hp->n_ctx_train > rows - PI_POS_EMBD_OFFSET)
            hp->n_ctx_train = rows - PI_POS_EMBD_OFFSET;
    }
    if (!d->output)
        d->output = d->token_embd; /* tied embeddings */

    d->layers = pi_calloc(a, (size_t)hp->n_layer, sizeof *d->layers);
    if (!d->layers)
        PI_FAIL(err, PI_ERR_NOMEM, "out of memory for %lld layers", (long long)hp->n_layer);
    for (int64_t il = 0; il < hp->n_layer; il++) {
        int s = build_layer(&r, hp, il, &d->layers[il]);
        if (s == PI_OK && progress &&
            progress(progress_user, 0.5f + 0.5f * (float)(il + 1) / (float)hp->n_layer))
            s = pi_error_set(err, PI_ERR_ABORTED, "model loading aborted by the caller");
        if (s < 0) {
            pi_model_desc_free(d, a);
            return s;
        }
    }
    int64_t n_pred = 0;
    for (int64_t il = 0; il < hp->n_layer; il++)
        n_pred += d->layers[il].fc1 != NULL;
    hp->predictors = n_pred == hp->n_layer;
    st = n_pred && !hp->predictors
             ? pi_error_set(err, PI_ERR_FORMAT, "sparsified file with predictors (fc1, fc2) in "
                            "%lld of its %lld layers: a file has them in every layer or in none",
                            (long long)n_pred, (long long)hp->n_layer)
             : resolve_layers(&r, d);
    if (st == PI_OK)
        st = check_tensors(&r, d, a);
    if (st < 0)
        pi_model_desc_free(d, a);
    return st;
}

void pi_model_desc_free(struct pi_model_desc *d, const struct pi_allocator *a) {
    pi_free(a, d->layers);
    d->layers = NULL;
}
