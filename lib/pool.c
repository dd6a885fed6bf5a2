/*
 * pool.c - worker threads for rlb_pool_run: the caller publishes a job
 * under the mutex and bumps its generation; every thread, the caller
 * included, takes items from one atomic counter until none is left; the
 * last worker to finish wakes the caller.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <unistd.h>

#include "pool.h"

struct rlb_pool_worker {
	struct rlb_pool *pool;
	pthread_t thread;
	unsigned index;
};

struct rlb_pool {
	pthread_mutex_t mutex;
	pthread_cond_t go;	/* a new job, or stop */
	pthread_cond_t done;	/* the last worker left the job */
	unsigned workers;	/* started */
	unsigned busy;		/* workers still in the job */
	unsigned long gen;	/* jobs published */
	int stop;
	rlb_pool_fn *fn;
	void *ctx;
	size_t n;
	atomic_size_t next;
	struct rlb_pool_worker w[];
};

static void take_items(struct rlb_pool *p, unsigned worker)
{
	size_t i;

	while ((i = atomic_fetch_add(&p->next, 1)) < p->n)
		p->fn(p->ctx, i, worker);
}

static void *worker_main(void *arg)
{
	struct rlb_pool_worker *w = arg;
	struct rlb_pool *p = w->pool;
	unsigned long seen = 0;

	pthread_mutex_lock(&p->mutex);
	for (;;) {
		while (p->gen == seen && !p->stop)
			pthread_cond_wait(&p->go, &p->mutex);
		if (p->stop)
			break;
		seen = p->gen;
		pthread_mutex_unlock(&p->mutex);
		take_items(p, w->index);
		pthread_mutex_lock(&p->mutex);
		if (--p->busy == 0)
			pthread_cond_signal(&p->done);
	}
	pthread_mutex_unlock(&p->mutex);
	return NULL;
}

unsigned rlb_pool_threads_for(unsigned threads)
{
	if (threads == 0) {
		long cpus = sysconf(_SC_NPROCESSORS_ONLN);

		threads = cpus > 0 ? (unsigned)cpus : 1;
	}
	return threads < RLB_POOL_MAX ? threads : RLB_POOL_MAX;
}

int rlb_pool_new(struct rlb_pool **out, unsigned threads, struct rlb_err *err)
{
	struct rlb_pool *p;
	unsigned i;

	*out = NULL;
	threads = rlb_pool_threads_for(threads);
	p = calloc(1, sizeof(*p) + (threads - 1) * sizeof(p->w[0]));
	if (!p)
		return rlb_err_set(err, RLB_ENOMEM, "out of memory");
	if (pthread_mutex_init(&p->mutex, NULL)) {
		free(p);
		return rlb_err_set(err, RLB_ENOMEM, "cannot create a mutex");
	}
	if (pthread_cond_init(&p->go, NULL)) {
		pthread_mutex_destroy(&p->mutex);
		free(p);
		return rlb_err_set(err, RLB_ENOMEM, "cannot create a condition variable");
	}
	if (pthread_cond_init(&p->done, NULL)) {
		pthread_cond_destroy(&p->go);
		pthread_mutex_destroy(&p->mutex);
		free(p);
		return rlb_err_set(err, RLB_ENOMEM, "cannot create a condition variable");
	}
	atomic_init(&p->next, 0);
	for (i = 0; i + 1 < threads; i++) {
		struct rlb_pool_worker *w = &p->w[p->workers];

		w->pool = p;
		w->index = p->workers + 1;
		if (pthread_create(&w->thread, NULL, worker_main, w))
			break;
		p->workers++;
	}
	*out = p;
	return 0;
}

void rlb_pool_free(struct rlb_pool *p)
{
	unsigned i;

	if (!p)
		return;
	pthread_mutex_lock(&p->mutex);
	p->stop = 1;
	pthread_cond_broadcast(&p->go);
	pthread_mutex_unlock(&p->mutex);
	for (i = 0; i < p->workers; i++)
		pthread_join(p->w[i].thread, NULL);
	pthread_cond_destroy(&p->go);
	pthread_cond_destroy(&p->done);
	pthread_mutex_destroy(&p->mutex);
	free(p);
}

unsigned rlb_pool_threads(const struct rlb_pool *p)
{
	return p ? p->workers + 1 : 1;
}

void rlb_pool_run(struct rlb_pool *p, size_t n, rlb_pool_fn *fn, void *ctx)
{
	rlb_pool_run_beside(p, n, fn, ctx, NULL, NULL);
}

void rlb_pool_run_beside(struct rlb_pool *p, size_t n, rlb_pool_fn *fn,
			 void *ctx, void (*side)(void *), void *side_ctx)
{
	size_t i;

	if (!p || p->workers == 0 || n == 0) {
		if (side)
			side(side_ctx);
		for (i = 0; i < n; i++)
			fn(ctx, i, 0);
		return;
	}
	pthread_mutex_lock(&p->mutex);
	p->fn = fn;
	p->ctx = ctx;
	p->n = n;
	atomic_store(&p->next, 0);
	p->busy = p->workers;
	p->gen++;
	pthread_cond_broadcast(&p->go);
	pthread_mutex_unlock(&p->mutex);
	if (side)
		side(side_ctx);
	take_items(p, 0);
	pthread_mutex_lock(&p->mutex);
	while (p->busy)
		pthread_cond_wait(&p->done, &p->mutex);
	pthread_mutex_unlock(&p->mutex);
}
