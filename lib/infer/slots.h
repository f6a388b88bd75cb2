/* slots.h -- hybrid execution's units and activation slots (used by forward.c).
 *
 * Each op runs on the "unit" that holds its weights: the host (the context's CPU
 * backend) or the device (c->hy). Activations live in slots with a copy on each side
 * and a record of where they are current; an op asks for its inputs where it runs
 * (copied over when stale: an upload is queued, a download waits for the device) and
 * marks its outputs current there only. With no device every slot stays on the host
 * and no copy is ever made. A layer split between the two computes its device
 * neurons on the device while the host computes the others; the device's work is
 * queued first and its result fetched last, the one wait of the layer in decode when
 * attention and predictor live on the device as well. */
#ifndef PI_INFER_SLOTS_H
#define PI_INFER_SLOTS_H

#include "infer/ctx.h"

enum { HOST = 1, DEV = 2 };

struct unit {
    const struct pi_backend_vtable *be;
    struct pi_backend *b;
    int at;
};

struct slot {
    float *p[3]; /* p[HOST], p[DEV] */
    int64_t width;
    int valid;
};

/* One step's state: T entries e at positions pos, the units and the slots. */
struct run {
    struct pi_ctx *c;
    int64_t T;
    const pi_batch_entry *e;
    const int32_t *pos;
    struct unit host, dev;
    struct slot x, xn, ya, q, k, v, att, g, u, score, hid;
    int st; /* first copy failure */
};

/* The slot's values on side `at`, copied there if stale. */
static inline float *in(struct run *r, struct slot *s, int at) {
    if (!(s->valid & at)) {
        const size_t bytes = (size_t)(r->T * s->width) * sizeof(float);
        const int st = at == DEV ? r->dev.be->upload(r->dev.b, s->p[DEV], s->p[HOST], bytes)
                                 : r->dev.be->download(r->dev.b, s->p[HOST], s->p[DEV], bytes);
        if (st < 0 && r->st >= 0)
            r->st = st;
        s->valid |= at;
    }
    return s->p[at];
}

/* The slot as an op's output on side `at` (the other side's copy becomes stale). */
static inline float *out(struct slot *s, int at) {
    s->valid = at;
    return s->p[at];
}

/* Read, then written in place. */
static inline float *inout(struct run *r, struct slot *s, int at) {
    float *p = in(r, s, at);
    s->valid = at;
    return p;
}

static inline const struct unit *unit(const struct run *r, int on_dev) {
    return on_dev ? &r->dev : &r->host;
}

static inline void slot_init(struct slot *s, float *h, float *d, int64_t width) {
    s->p[HOST] = h;
    s->p[DEV] = d;
    s->width = width;
    s->valid = HOST;
}

#endif
