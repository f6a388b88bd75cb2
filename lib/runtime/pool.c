#include "runtime/pool.h"

#include <stdatomic.h>

#include "powerinfer.h"
#include "util/os.h"

/* Waiting for work or for the other threads: spin a little (a decode step dispatches
 * jobs every few microseconds), then yield the processor (so a machine with more
 * runnable threads than cores still makes progress), then, for workers, sleep. */
#define SPIN_ROUNDS 2000
#define YIELD_ROUNDS 2000

/* The job ticket packs everything a thread needs to claim a chunk safely in one
 * atomic word: job generation (24 bits), chunk count (20 bits), next chunk (20 bits).
 * A thread that saw an older generation can never claim a chunk of a newer job. */
#define T_IDX_BITS 20
#define T_N_BITS 20
#define T_MASK ((UINT64_C(1) << T_IDX_BITS) - 1)
#define T_GEN(t) ((t) >> (T_IDX_BITS + T_N_BITS))
#define T_N(t) (((t) >> T_IDX_BITS) & T_MASK)
#define T_IDX(t) ((t)&T_MASK)

struct worker {
    struct pi_pool *pool;
    int ith;
    struct pi_thread *thread;
};

struct pi_pool {
    const struct pi_allocator *alloc;
    int n;
    struct worker *workers; /* [n - 1] */
    struct pi_waiter *waiter;
    atomic_uint_fast64_t ticket;
    atomic_uint_fast64_t generation; /* 24-bit job id of the current job */
    atomic_int done;                 /* chunks finished in the current job */
    atomic_int stop;
    int sleeping; /* workers blocked on the waiter; under its lock */
    /* The current job; written before its ticket is published. */
    pi_pool_fn fn;
    void *arg;
    int64_t n_items, grain;
};

/* Claim and run chunks of job `gen` until none are left. */
static void work(struct pi_pool *p, uint64_t gen, int ith) {
    for (;;) {
        uint64_t t = atomic_load_explicit(&p->ticket, memory_order_acquire);
        if (T_GEN(t) != gen || T_IDX(t) >= T_N(t))
            return;
        if (!atomic_compare_exchange_weak_explicit(&p->ticket, &t, t + 1, memory_order_acq_rel,
                                                   memory_order_acquire))
            continue;
        /* Read the job only once a chunk of it is ours: until that chunk is done the
         * caller cannot start the next job and overwrite these fields (reading them
         * before the claim raced with the next job's set-up; ThreadSanitizer,
         * tests/tsan). */
        pi_pool_fn fn = p->fn;
        void *arg = p->arg;
        int64_t n = p->n_items, grain = p->grain;
        int64_t lo = (int64_t)T_IDX(t) * grain;
        int64_t hi = lo + grain < n ? lo + grain : n;
        fn(arg, lo, hi, ith);
        atomic_fetch_add_explicit(&p->done, 1, memory_order_release);
    }
}

static void worker_main(void *arg) {
    struct worker *w = arg;
    struct pi_pool *p = w->pool;
    uint64_t seen = 0;
    for (;;) {
        uint64_t gen;
        int spins = 0;
        while ((gen = atomic_load_explicit(&p->generation, memory_order_acquire)) == seen &&
               !atomic_load_explicit(&p->stop, memory_order_acquire) &&
               spins < SPIN_ROUNDS + YIELD_ROUNDS) {
            if (spins++ < SPIN_ROUNDS)
                pi_os_cpu_relax();
            else
                pi_os_yield();
        }
        if (gen == seen && !atomic_load(&p->stop)) {
            pi_os_waiter_lock(p->waiter);
            p->sleeping++;
            while ((gen = atomic_load(&p->generation)) == seen && !atomic_load(&p->stop))
                pi_os_waiter_wait(p->waiter);
            p->sleeping--;
            pi_os_waiter_unlock(p->waiter);
        }
        if (atomic_load(&p->stop))
            return;
        seen = gen;
        work(p, gen, w->ith);
    }
}

static void wake_all(struct pi_pool *p) {
    pi_os_waiter_lock(p->waiter);
    if (p->sleeping)
        pi_os_waiter_broadcast(p->waiter);
    pi_os_waiter_unlock(p->waiter);
}

void pi_pool_destroy(struct pi_pool *p) {
    if (!p)
        return;
    atomic_store(&p->stop, 1);
    if (p->waiter)
        wake_all(p);
    for (int i = 0; i < p->n - 1; i++)
        pi_os_thread_join(p->workers[i].thread, p->alloc);
    pi_os_waiter_destroy(p->waiter, p->alloc);
    pi_free(p->alloc, p->workers);
    pi_free(p->alloc, p);
}

int pi_pool_create(struct pi_pool **out, int n_threads, const struct pi_allocator *a) {
    *out = NULL;
    if (n_threads < 1)
        return PI_ERR_INVALID_ARG;
    struct pi_pool *p = pi_calloc(a, 1, sizeof *p);
    if (!p)
        return PI_ERR_NOMEM;
    p->alloc = a;
    p->n = 1; /* threads started so far, for destroy */
    atomic_init(&p->ticket, 0);
    atomic_init(&p->generation, 0);
    atomic_init(&p->done, 0);
    atomic_init(&p->stop, 0);
    int st = pi_os_waiter_create(&p->waiter, a);
    if (st == PI_OK && n_threads > 1) {
        p->workers = pi_calloc(a, (size_t)n_threads - 1, sizeof *p->workers);
        if (!p->workers)
            st = PI_ERR_NOMEM;
    }
    for (int i = 0; st == PI_OK && i < n_threads - 1; i++) {
        p->workers[i] = (struct worker){p, i + 1, NULL};
        st = pi_os_thread_start(&p->workers[i].thread, a, worker_main, &p->workers[i]);
        if (st == PI_OK)
            p->n++;
    }
    if (st != PI_OK) {
        pi_pool_destroy(p);
        return st;
    }
    *out = p;
    return PI_OK;
}

void pi_pool_for(struct pi_pool *p, int64_t n, int64_t grain, pi_pool_fn fn, void *arg) {
    if (n <= 0)
        return;
    if (grain < 1)
        grain = 1;
    int64_t chunks = (n + grain - 1) / grain;
    if (chunks > (int64_t)T_MASK) { /* keep the count within the ticket's field */
        grain = (n + (int64_t)T_MASK - 1) / (int64_t)T_MASK;
        chunks = (n + grain - 1) / grain;
    }
    if (p->n == 1 || chunks == 1) {
        for (int64_t lo = 0; lo < n; lo += grain)
            fn(arg, lo, lo + grain < n ? lo + grain : n, 0);
        return;
    }
    uint64_t gen = (atomic_load_explicit(&p->generation, memory_order_relaxed) + 1) &
                   ((UINT64_C(1) << 24) - 1);
    p->fn = fn;
    p->arg = arg;
    p->n_items = n;
    p->grain = grain;
    atomic_store_explicit(&p->done, 0, memory_order_relaxed);
    atomic_store_explicit(&p->ticket,
                          gen << (T_IDX_BITS + T_N_BITS) | (uint64_t)chunks << T_IDX_BITS,
                          memory_order_release);
    atomic_store_explicit(&p->generation, gen, memory_order_release);
    wake_all(p);
    work(p, gen, 0);
    for (int spins = 0; atomic_load_explicit(&p->done, memory_order_acquire) < chunks; spins++) {
        if (spins < SPIN_ROUNDS)
            pi_os_cpu_relax();
        else
            pi_os_yield();
    }
}

int pi_pool_n_threads(const struct pi_pool *p) {
    return p->n;
}
