/*
 * trace_readahead.c - loads the trace reader's data frames: reads one,
 * checks it against the seek table and decompresses it, on the consumer's
 * thread or, after rlb_trace_reader_set_threads, on read-ahead threads that
 * decompress the frames after the main cursor's while it works on its own.
 */
#include <pthread.h>
#include <stdlib.h>
#include <zstd.h>
#include <zstd_errors.h>

#include "trace_read_impl.h"
#include "util.h"

/*
 * Read-ahead of the main cursor (rlb_trace_reader_set_threads): workers
 * decompress the frames after the cursor's into a ring of slots, frame i
 * in slots[i % nslots], while the cursor works on its own.  Frames
 * [head, next) are handed out; the cursor takes head by swapping buffers
 * with its slot.  Workers only read what open set (decode_frame); all
 * reader and cursor state is changed by the consumer.
 */
struct ra_slot {
	uint8_t *raw;
	size_t rcap, rlen;
	int done;		/* raw (or code and err) hold its frame */
	int code;
	struct rlb_err err;
};

struct ra_worker {
	struct rlb_trace_reader *r;
	pthread_t thread;
	ZSTD_DCtx *dctx;
	uint8_t *cbuf;
	size_t ccap;
};

struct readahead {
	pthread_mutex_t mutex;
	pthread_cond_t work;	/* a frame to hand out, or stop */
	pthread_cond_t done;	/* a frame decoded, or a worker idle */
	size_t head;		/* the frame the cursor takes next */
	size_t next;		/* the next to hand out */
	size_t end;		/* none is handed out from here on */
	unsigned busy;		/* workers decoding */
	int stop;
	uint64_t taken;		/* frames the cursor took from workers */
	unsigned nslots, nworkers;
	struct ra_slot *slots;
	struct ra_worker *w;
};

/*
 * Read frame i, check it against the seek table and decompress it with
 * dctx into *raw (grown to fit, as is *cbuf for the compressed bytes):
 * *rlen, or an error.  Reads nothing open did not set, so read-ahead
 * workers run it beside the consumer.
 */
static int decode_frame(const struct rlb_trace_reader *r, size_t i,
			ZSTD_DCtx *dctx, uint8_t **cbuf, size_t *ccap,
			uint8_t **raw, size_t *rcap, size_t *rlen,
			struct rlb_err *err)
{
	const struct rframe *f = &r->frames[i];
	struct fhdr fh;
	const char *why = NULL;
	uint8_t *cb;
	size_t got;
	int ret;

	if (rlb_grow(cbuf, ccap, f->csize, 1) != 0 ||
	    rlb_grow(raw, rcap, f->rsize, 1) != 0)
		return rlb_err_set(err, RLB_ENOMEM, "out of memory");
	cb = *cbuf;
	ret = rrt_read_at(r, f->off, cb, f->csize, err);
	if (ret != 0)
		return ret;
	if (rlb_get_u32(cb) != RRT_ZSTD_MAGIC)
		return rlb_rrt_at_err(err, RLB_ECORRUPT, "data frame", f->off,
			      "not a zstd frame (magic 0x%08x)", rlb_get_u32(cb));
	ret = rlb_rrt_parse_fhdr(cb, f->csize, &fh, &why);
	if (ret != 0)
		return rlb_rrt_at_err(err, RLB_ECORRUPT, "data frame", f->off, "%s",
			      ret > 0 ? "frame header cut" : why);
	if (fh.content != f->rsize)
		return rlb_rrt_at_err(err, RLB_ECORRUPT, "data frame", f->off,
			      "content size %llu, the seek table says %u",
			      (unsigned long long)fh.content, f->rsize);
	if (r->has_seek) {
		/* Bound the content by its blocks, as walk_frame does. */
		uint64_t pos = fh.size, bound = 0;
		uint32_t last = 0, skip, bb;

		while (!last) {
			if (pos + 3 > f->csize)
				return rlb_rrt_at_err(err, RLB_ECORRUPT, "data frame", f->off,
					      "blocks run past the frame's end");
			if (rlb_rrt_block_info(cb + pos, &last, &skip, &bb, &why) != 0)
				return rlb_rrt_at_err(err, RLB_ECORRUPT, "data frame", f->off,
					      "%s at offset %llu", why,
					      (unsigned long long)(f->off + pos));
			pos += 3 + (uint64_t)skip;
			bound += bb;
		}
		if (pos + 4 != f->csize || fh.content > bound)
			return rlb_rrt_at_err(err, RLB_ECORRUPT, "data frame", f->off,
				      "frame size does not match the seek table");
	}
	got = ZSTD_decompressDCtx(dctx, *raw, f->rsize, cb, f->csize);
	if (ZSTD_isError(got)) {
		if (ZSTD_getErrorCode(got) == ZSTD_error_checksum_wrong)
			return rlb_rrt_at_err(err, RLB_ECORRUPT, "data frame", f->off,
				      "checksum mismatch");
		return rlb_rrt_at_err(err, RLB_ECORRUPT, "data frame", f->off,
			      "corrupt zstd data (%s)", ZSTD_getErrorName(got));
	}
	if (got != f->rsize)
		return rlb_rrt_at_err(err, RLB_ECORRUPT, "data frame", f->off,
			      "content is %zu bytes, expected %u", got, f->rsize);
	if (got < RRT_SEQ_FIXED)
		return rlb_rrt_at_err(err, RLB_ECORRUPT, "data frame", f->off,
			      "content too short for a sequence");
	*rlen = got;
	return 0;
}

static void *ra_main(void *arg)
{
	struct ra_worker *w = arg;
	const struct rlb_trace_reader *r = w->r;
	struct readahead *ra = r->ra;

	pthread_mutex_lock(&ra->mutex);
	for (;;) {
		struct ra_slot *sl;
		size_t i;
		int code;

		/* frames [head, next) hold distinct slots: next's is free */
		while (!ra->stop &&
		       (ra->next >= ra->end || ra->next - ra->head >= ra->nslots))
			pthread_cond_wait(&ra->work, &ra->mutex);
		if (ra->stop)
			break;
		i = ra->next++;
		sl = &ra->slots[i % ra->nslots];
		ra->busy++;
		pthread_mutex_unlock(&ra->mutex);
		code = decode_frame(r, i, w->dctx, &w->cbuf, &w->ccap,
				    &sl->raw, &sl->rcap, &sl->rlen, &sl->err);
		pthread_mutex_lock(&ra->mutex);
		sl->code = code;
		sl->done = 1;
		ra->busy--;
		pthread_cond_broadcast(&ra->done);
	}
	pthread_mutex_unlock(&ra->mutex);
	return NULL;
}

/*
 * Frame i for the main cursor from the workers, who then go on up to
 * stop.  Any other frame than the one after the last taken (a seek)
 * drops what was read ahead.
 */
static int ra_take(struct rlb_trace_reader *r, struct cursor *c, size_t i,
		   size_t stop, size_t *rlen, struct rlb_err *err)
{
	struct readahead *ra = r->ra;
	struct ra_slot *sl = &ra->slots[i % ra->nslots];
	uint8_t *raw;
	size_t cap;
	unsigned k;
	int ret;

	pthread_mutex_lock(&ra->mutex);
	if (i != ra->head) {
		/* hand nothing more out; wait until no worker fills a slot */
		ra->end = 0;
		while (ra->busy)
			pthread_cond_wait(&ra->done, &ra->mutex);
		for (k = 0; k < ra->nslots; k++)
			ra->slots[k].done = 0;
		ra->head = ra->next = i;
	}
	ra->end = stop < r->nframes ? stop : r->nframes;
	pthread_cond_broadcast(&ra->work);
	while (!sl->done)
		pthread_cond_wait(&ra->done, &ra->mutex);
	ret = sl->code;
	if (ret != 0)
		*err = sl->err;
	*rlen = sl->rlen;
	/* the cursor is done with its frame: its buffer takes the slot's place */
	raw = c->raw;
	cap = c->rcap;
	c->raw = sl->raw;
	c->rcap = sl->rcap;
	sl->raw = raw;
	sl->rcap = cap;
	sl->done = 0;
	ra->head = i + 1;
	ra->taken++;
	pthread_cond_broadcast(&ra->work);
	pthread_mutex_unlock(&ra->mutex);
	return ret;
}

void rlb_rrt_ra_free(struct readahead *ra)
{
	unsigned k;

	if (!ra)
		return;
	pthread_mutex_lock(&ra->mutex);
	ra->stop = 1;
	pthread_cond_broadcast(&ra->work);
	pthread_mutex_unlock(&ra->mutex);
	for (k = 0; k < ra->nworkers; k++)
		pthread_join(ra->w[k].thread, NULL);
	for (k = 0; k < ra->nworkers; k++) {
		ZSTD_freeDCtx(ra->w[k].dctx);
		free(ra->w[k].cbuf);
	}
	for (k = 0; k < ra->nslots; k++)
		free(ra->slots[k].raw);
	pthread_cond_destroy(&ra->done);
	pthread_cond_destroy(&ra->work);
	pthread_mutex_destroy(&ra->mutex);
	free(ra->slots);
	free(ra->w);
	free(ra);
}

/* Decompressed bytes read ahead at most (frames are 8 MiB by default). */
#define RA_BYTES_MAX ((size_t)256 << 20)

int rlb_trace_reader_set_threads(struct rlb_trace_reader *r, unsigned n,
				 struct rlb_err *err)
{
	struct readahead *ra;
	unsigned k;

	size_t i, most = 0, nslots;

	rlb_rrt_ra_free(r->ra);
	r->ra = NULL;
	if (n > RLB_TRACE_MAX_THREADS)
		n = RLB_TRACE_MAX_THREADS;
	/* two frames a thread, within RA_BYTES_MAX of the largest frames */
	for (i = 0; i < r->nframes; i++)
		if (r->frames[i].rsize > most)
			most = r->frames[i].rsize;
	nslots = 2 * (size_t)n;
	if (most && nslots > RA_BYTES_MAX / most)
		nslots = RA_BYTES_MAX / most;
	if (n > nslots)
		n = (unsigned)nslots;
	if (n < 2)
		return 0;
	ra = calloc(1, sizeof(*ra));
	if (ra) {
		ra->nslots = (unsigned)nslots;
		ra->slots = calloc(ra->nslots, sizeof(*ra->slots));
		ra->w = calloc(n, sizeof(*ra->w));
	}
	if (!ra || !ra->slots || !ra->w || pthread_mutex_init(&ra->mutex, NULL) != 0)
		goto nomem;
	if (pthread_cond_init(&ra->work, NULL) != 0) {
		pthread_mutex_destroy(&ra->mutex);
		goto nomem;
	}
	if (pthread_cond_init(&ra->done, NULL) != 0) {
		pthread_cond_destroy(&ra->work);
		pthread_mutex_destroy(&ra->mutex);
		goto nomem;
	}
	/* workers wait for the first frame taken; they read ra through r */
	r->ra = ra;
	for (k = 0; k < n; k++) {
		struct ra_worker *w = &ra->w[ra->nworkers];

		w->r = r;
		w->dctx = rlb_rrt_dctx_new();
		if (!w->dctx)
			break;
		if (pthread_create(&w->thread, NULL, ra_main, w) != 0) {
			ZSTD_freeDCtx(w->dctx);
			break;
		}
		ra->nworkers++;
	}
	if (ra->nworkers == 0) {
		/* none could start: decode on the consumer, as without */
		rlb_rrt_ra_free(ra);
		r->ra = NULL;
	}
	return 0;
nomem:
	if (ra) {
		free(ra->slots);
		free(ra->w);
	}
	free(ra);
	return rlb_err_set(err, RLB_ENOMEM, "out of memory");
}

uint64_t rlb_rrt_reader_frames_ahead(const struct rlb_trace_reader *r)
{
	return r->ra ? r->ra->taken : 0;
}

int rlb_rrt_load_frame(struct rlb_trace_reader *r, struct cursor *c, size_t i,
		       size_t stop, struct rlb_err *err)
{
	struct rframe *f = &r->frames[i];
	size_t got = 0;
	int ret;

	if (c == &r->main && r->ra)
		ret = ra_take(r, c, i, stop, &got, err);
	else
		ret = decode_frame(r, i, r->dctx, &r->cbuf, &r->ccap,
				   &c->raw, &c->rcap, &got, err);
	if (ret != 0)
		return ret;
	if (!f->step_known) {
		f->step = rlb_get_u32(c->raw);
		f->step_known = 1;
	}
	c->cur = i;
	c->loaded = 1;
	c->rlen = got;
	c->rpos = 0;
	c->rec = 0;
	return 0;
}
