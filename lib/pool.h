/*
 * pool.h - a fixed set of worker threads that run the items of one job
 * at a time, the caller taking part.  Used where work splits into
 * independent parts whose results do not depend on which thread ran them
 * (the traffic count: one part per plan and layer range).
 */
#ifndef RLB_POOL_H
#define RLB_POOL_H

#include <stddef.h>

#include "err.h"

#ifdef __cplusplus
extern "C" {
#endif

struct rlb_pool;

/* Run item ITEM of a job; WORKER in [0, threads) names the thread. */
typedef void rlb_pool_fn(void *ctx, size_t item, unsigned worker);

/*
 * A pool of THREADS threads in all: THREADS - 1 workers plus the caller
 * of rlb_pool_run.  THREADS 0 means one per online CPU (at most
 * RLB_POOL_MAX).  Workers that cannot be started are done without (the
 * pool then has fewer threads; rlb_pool_threads says how many), so the
 * only error is RLB_ENOMEM.
 */
#define RLB_POOL_MAX 64
int rlb_pool_new(struct rlb_pool **out, unsigned threads, struct rlb_err *err);
/* The threads rlb_pool_new makes of THREADS: 0 is one per online CPU. */
unsigned rlb_pool_threads_for(unsigned threads);
/* Stop and join the workers; NULL is a no-op. */
void rlb_pool_free(struct rlb_pool *p);
/* Threads of the pool, the caller included; 1 for NULL. */
unsigned rlb_pool_threads(const struct rlb_pool *p);

/*
 * Run fn(ctx, i, worker) for every i in [0, n) and return when all are
 * done.  Items are taken in ascending order by whichever thread is free.
 * One job at a time: calls on one pool must not overlap, and fn must not
 * call rlb_pool_run.  p NULL runs the items in order here.
 */
void rlb_pool_run(struct rlb_pool *p, size_t n, rlb_pool_fn *fn, void *ctx);

/*
 * The same, with side(side_ctx) run on the calling thread while the
 * workers start on the items; the caller then joins them.  For work that
 * overlaps the job (reading the next input).  p NULL: side, then the
 * items in order.
 */
void rlb_pool_run_beside(struct rlb_pool *p, size_t n, rlb_pool_fn *fn,
			 void *ctx, void (*side)(void *), void *side_ctx);

#ifdef __cplusplus
}
#endif

#endif
