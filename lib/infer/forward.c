/* forward.c -- the llama-family forward pass (llama, bamboo), written as the
 * equations. Shapes: E = n_embd, F = n_ff, T = tokens in this step, Hq/Hkv = heads,
 * D = head dim. Every op goes through the backend vtable. */
#include <string.h>

#include "infer/ctx.h"

static enum pi_act act_of(enum pi_ffn_act a) {
    switch (a) {
    case PI_ACT_RELU:
        return PI_ACT_RELU_MUL;
    case PI_ACT_RELU_BOTH:
        return PI_ACT_RELU_RELU_MUL;
    case PI_ACT_SILU:
        break;
    }
    return PI_ACT_SILU_MUL;
}

/* One step of at most n_batch tokens at positions pos0 ... pos0 + T - 1. When
 * `logits` is non-NULL, the last token's logits are written there. */
static int step(struct pi_ctx *c, const int32_t *tokens, int64_t T, int64_t pos0, float *logits) {
    const struct pi_hparams *hp = c->hp;
    const struct pi_backend_vtable *be = c->be;
    struct pi_backend *b = c->b;
    const int64_t E = hp->n_embd;

    be->get_rows(b, &c->tok_embd, tokens, T, c->x);                /* x [T][E] */
    for (int64_t l = 0; l < hp->n_layer; l++) {
        const struct pi_layer_w *L = &c->layers[l];
        /* attention block */
        be->rmsnorm(b, c->x, &L->attn_norm, hp->rms_eps, T, c->xn); /* xn [T][E] */
        be->matmul(b, &L->wq, c->xn, T, c->q);                     /* q [T][Hq*D] */
        be->matmul(b, &L->wk, c->xn, T, c->k);                     /* k [T][Hkv*D] */
        be->matmul(b, &L->wv, c->xn, T, c->v);                     /* v [T][Hkv*Dv] */
        be->rope(b, c->q, T, hp->n_head, hp->head_dim_k, hp->n_rot, pos0, hp->rope_freq_base,
                 hp->rope_scale, 0);
        be->rope(b, c->k, T, hp->n_head_kv, hp->head_dim_k, hp->n_rot, pos0,
                 hp->rope_freq_base, hp->rope_scale, 0);
        be->kv_store(b, c->kv, l, pos0, T, c->k, c->v);
        be->attention(b, c->kv, l, c->q, T, pos0, c->att);         /* att [T][Hq*Dv] */
        be->matmul(b, &L->wo, c->att, T, c->xn);                   /* xn [T][E] */
        be->add(b, c->x, c->xn, T * E);                            /* x += attn */
        /* feed-forward block */
        be->rmsnorm(b, c->x, &L->ffn_norm, hp->rms_eps, T, c->xn);
        be->matmul(b, &L->gate, c->xn, T, c->g);                   /* g [T][F] */
        be->matmul(b, &L->up, c->xn, T, c->u);                     /* u [T][F] */
        be->ffn_act(b, act_of(hp->ffn_act), c->g, c->u, T * hp->n_ff);
        if (L->has_down)
            be->matmul(b, &L->down, c->g, T, c->xn);               /* xn [T][E] */
        else
            be->matmul_t(b, &L->down_t, c->g, T, c->xn);
        be->add(b, c->x, c->xn, T * E);                            /* x += ffn */
        if (c->abort_fn && c->abort_fn(c->abort_user))
            PI_FAIL(&c->err, PI_ERR_ABORTED, "decode aborted by the caller");
    }
    if (logits) {
        const float *last = c->x + (T - 1) * E;
        be->rmsnorm(b, last, &c->output_norm, hp->rms_eps, 1, c->xn);
        be->matmul(b, &c->output, c->xn, 1, logits);                /* [n_vocab] */
    }
    return be->sync(b);
}

int pi_forward(struct pi_ctx *c, const int32_t *tokens, int64_t n) {
    int64_t done = 0;
    while (done < n) {
        int64_t T = n - done < c->n_batch ? n - done : c->n_batch;
        int last = done + T == n;
        PI_TRY(step(c, tokens + done, T, c->pos + done, last ? c->logits : NULL));
        done += T;
    }
    c->pos += n;
    c->has_logits = 1;
    return PI_OK;
}
