#include "runtime/pool.h"

#include <stdatomic.h>

#include "powerinfer.h"
#include "util/os.h"

/* Waiting for work or for the other threads: spin a little (a decode step dispatches
 * jobs every few microseconds), then yield the processor (so a machine with more
 * runnable threads than cores still makes progress), then, for workers, sleep. */
#define SPIN_ROUNDS 2000
#define YIELD_ROUNDS 2000

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
    atomic_uint generation; /* bumped for every job */
    atomic_int pending;     /* workers still running the current job */
    atomic_int stop;
    int sleeping;           /* workers blocked on the waiter; under its lock */
    pi_pool_fn fn;
    void *arg;
};

static void worker_main(void *p) {
    struct worker *w = p;
    struct pi_pool *pool = w->pool;
    unsigned seen = 0;
    for (;;) {
        unsigned gen;
        int spins = 0;
        while ((gen = atomic_load_explicit(&pool->generation, memory_order_acquire)) == seen &&
               !atomic_load_explicit(&pool->stop, memory_order_acquire) &&
               spins < SPIN_ROUNDS + YIELD_ROUNDS) {
            if (spins++ < SPIN_ROUNDS)
                pi_os_cpu_relax();
            else
                pi_os_yield();
        }
        if (gen == seen && !atomic_load(&pool->stop)) {
            pi_os_waiter_lock(pool->waiter);
            pool->sleeping++;
            while ((gen = atomic_load(&pool->generation)) == seen && !atomic_load(&pool->stop))
                pi_os_waiter_wait(pool->waiter);
            pool->sleeping--;
            pi_os_waiter_unlock(pool->waiter);
        }
        if (atomic_load(&pool->stop))
            return;
        seen = gen;
        pool->fn(pool->arg, w->ith, pool->n);
        atomic_fetch_sub_explicit(&pool->pending, 1, memory_order_acq_rel);
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
    atomic_init(&p->generation, 0);
    atomic_init(&p->pending, 0);
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

void pi_pool_run(struct pi_pool *p, pi_pool_fn fn, void *arg) {
    if (p->n == 1) {
        fn(arg, 0, 1);
        return;
    }
    p->fn = fn;
    p->arg = arg;
    atomic_store_explicit(&p->pending, p->n - 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&p->generation, 1, memory_order_acq_rel);
    wake_all(p);
    fn(arg, 0, p->n);
    for (int spins = 0; atomic_load_explicit(&p->pending, memory_order_acquire) != 0; spins++) {
        if (spins < SPIN_ROUNDS)
            pi_os_cpu_relax();
        else
            pi_os_yield();
    }
}

int pi_pool_n_threads(const struct pi_pool *p) {
    return p->n;
}
