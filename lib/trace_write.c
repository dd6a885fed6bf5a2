/*
 * trace_write.c - the streaming trace writer: validates each sequence,
 * codes it into the current data frame, and writes every finished frame
 * straight through to PATH.tmp, so a killed writer leaves all complete
 * frames readable.  Close adds the step index and the seek table.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zstd.h>

#include "trace_impl.h"
#include "util.h"

/* What the step index and the seek table need of each data frame. */
struct wframe {
	uint32_t step;
	uint32_t seqs;
	uint32_t csize;
	uint32_t rsize;
};

struct rlb_trace_writer {
	struct rlb_atomic_file af;
	struct rrt_shape s;
	ZSTD_CCtx *cctx;
	size_t frame_bytes;

	uint8_t *raw;			/* the frame being filled */
	size_t raw_len, raw_cap;
	uint8_t *cbuf;
	size_t cbuf_cap;
	uint32_t frame_step;
	uint32_t frame_seqs;

	int have_step;
	uint32_t last_step;

	struct wframe *frames;
	size_t nframes, frames_cap;
	uint32_t *metas;		/* (group, sample, tokens) per sequence */
	size_t nseqs, metas_cap;

	uint16_t *lay;			/* one layer's ids while sorting/ranking */
	float *lay_gates;
	size_t lay_cap, lay_gates_cap;

	int error;
	struct rlb_err err;
};

static int fail(struct rlb_trace_writer *w, int code)
{
	if (!w->error)
		w->error = code;
	return w->error;
}

/* Grow *p (nmemb elements of size) to hold at least need elements. */
static int write_all(struct rlb_trace_writer *w, const void *p, size_t n)
{
	if (n && fwrite(p, 1, n, w->af.fp) != n)
		return rlb_err_errno(&w->err, RLB_EIO, "cannot write '%s'",
				     rlb_atomic_name(&w->af));
	/* Hand the bytes to the kernel now: a killed writer keeps them. */
	if (fflush(w->af.fp) != 0)
		return rlb_err_errno(&w->err, RLB_EIO, "cannot write '%s'",
				     rlb_atomic_name(&w->af));
	return 0;
}

static int choose_coding(struct rrt_shape *s, int coding, struct rlb_err *err)
{
	int sorted = (s->h.flags & RLB_TRACE_F_SORTED) != 0;

	switch (coding) {
	case RLB_TRACE_CODING_DEFAULT:
		s->id_coding = sorted ? RRT_CODING_DELTA :
			s->id_bytes == 1 ? RRT_CODING_RANK : RRT_CODING_RAW;
		break;
	case RLB_TRACE_CODING_RAW:
		s->id_coding = RRT_CODING_RAW;
		break;
	case RLB_TRACE_CODING_RANK:
		if (s->id_bytes != 1)
			return rlb_err_set(err, RLB_EINVAL,
					   "rank coding needs at most 256 experts");
		s->id_coding = RRT_CODING_RANK;
		break;
	case RLB_TRACE_CODING_DELTA:
		if (!sorted)
			return rlb_err_set(err, RLB_EINVAL,
					   "delta coding needs the sorted flag");
		s->id_coding = RRT_CODING_DELTA;
		break;
	default:
		return rlb_err_set(err, RLB_EINVAL, "unknown id coding %d", coding);
	}
	s->chunk_tokens = s->id_coding == RRT_CODING_RANK ? RRT_RANK_CHUNK_TOKENS : 0;
	return 0;
}

int rlb_trace_writer_open(struct rlb_trace_writer **out, const char *path,
			  const struct rlb_trace_header *h,
			  const struct rlb_trace_writer_opts *opts,
			  struct rlb_err *err)
{
	struct rlb_trace_writer *w = NULL;
	uint8_t hdr[8 + RRT_H_SIZE_1_2 + RLB_LAYER_PATTERN_MAX + 3];
	int level = opts ? opts->level : 3;
	size_t fb = opts && opts->frame_bytes ? opts->frame_bytes : RRT_DEFAULT_FRAME_BYTES;
	size_t n;
	int ret;

	*out = NULL;
	ret = rlb_rrt_check_shape(h, "trace header", err);
	if (ret != 0)
		return ret;
	if (level < ZSTD_minCLevel() || level > ZSTD_maxCLevel())
		return rlb_err_set(err, RLB_ERANGE,
				   "zstd level %d is out of range [%d, %d]", level,
				   ZSTD_minCLevel(), ZSTD_maxCLevel());
	if (fb > RRT_MAX_FRAME_RAW)
		return rlb_err_set(err, RLB_ERANGE,
				   "frame size %zu exceeds the limit %u", fb,
				   RRT_MAX_FRAME_RAW);
	w = calloc(1, sizeof(*w));
	if (!w)
		return rlb_err_set(err, RLB_ENOMEM, "out of memory");
	w->s.h = *h;
	if (w->s.h.moe_layer_period == 0)
		w->s.h.moe_layer_period = 1;	/* a header made before 1.1 */
	w->s.h.version_major = RLB_TRACE_VERSION_MAJOR;
	w->s.h.version_minor = (uint16_t)rlb_rrt_header_minor(&w->s.h);
	w->s.id_bytes = rlb_trace_id_bytes(h);
	w->s.gate_coding = (h->flags & RLB_TRACE_F_GATES) ? RRT_GATES_F32 : RRT_GATES_NONE;
	w->s.frame_bytes = (uint32_t)fb;
	w->frame_bytes = fb;
	ret = choose_coding(&w->s, opts ? opts->coding : 0, err);
	if (ret != 0)
		goto out;
	w->cctx = ZSTD_createCCtx();
	if (!w->cctx) {
		ret = rlb_err_set(err, RLB_ENOMEM, "out of memory");
		goto out;
	}
	/*
	 * Routing bytes rarely repeat in runs of 5: at the fast levels a
	 * minimum match of 6 compresses as well, twice as fast, and the
	 * result decodes faster (trace_format/SPEC.md, section 12).
	 */
	if (ZSTD_isError(ZSTD_CCtx_setParameter(w->cctx, ZSTD_c_compressionLevel, level)) ||
	    ZSTD_isError(ZSTD_CCtx_setParameter(w->cctx, ZSTD_c_checksumFlag, 1)) ||
	    ZSTD_isError(ZSTD_CCtx_setParameter(w->cctx, ZSTD_c_contentSizeFlag, 1)) ||
	    (level >= 1 && level <= 3 &&
	     ZSTD_isError(ZSTD_CCtx_setParameter(w->cctx, ZSTD_c_minMatch, 6)))) {
		ret = rlb_err_set(err, RLB_EZSTD, "cannot set zstd parameters");
		goto out;
	}
	ret = rlb_atomic_open(&w->af, path, err);
	if (ret != 0)
		goto out;
	n = rlb_rrt_header_encode(&w->s, hdr, sizeof(hdr));
	ret = write_all(w, hdr, n);
	if (ret != 0) {
		rlb_err_set(err, ret, "%s", w->err.msg);
		goto out;
	}
	*out = w;
	w = NULL;
out:
	rlb_trace_writer_abort(w);
	return ret;
}

/* Compress the current frame and write it through to the file. */
static int flush_frame(struct rlb_trace_writer *w)
{
	size_t bound, c;
	int ret;

	if (w->frame_seqs == 0)
		return 0;
	if (w->nframes + 3 > RRT_SEEK_MAX_FRAMES)
		return rlb_err_set(&w->err, RLB_ERANGE,
				   "trace has too many frames (limit %u)",
				   RRT_SEEK_MAX_FRAMES - 2);
	bound = ZSTD_compressBound(w->raw_len);
	if (rlb_grow(&w->cbuf, &w->cbuf_cap, bound, 1) != 0 ||
	    rlb_grow(&w->frames, &w->frames_cap, w->nframes + 1, sizeof(*w->frames)) != 0)
		return rlb_err_set(&w->err, RLB_ENOMEM, "out of memory");
	c = ZSTD_compress2(w->cctx, w->cbuf, w->cbuf_cap, w->raw, w->raw_len);
	if (ZSTD_isError(c))
		return rlb_err_set(&w->err, RLB_EZSTD, "zstd: %s",
				   ZSTD_getErrorName(c));
	ret = write_all(w, w->cbuf, c);
	if (ret != 0)
		return ret;
	w->frames[w->nframes].step = w->frame_step;
	w->frames[w->nframes].seqs = w->frame_seqs;
	w->frames[w->nframes].csize = (uint32_t)c;
	w->frames[w->nframes].rsize = (uint32_t)w->raw_len;
	w->nframes++;
	w->raw_len = 0;
	w->frame_seqs = 0;
	return 0;
}

/* Branch-free compare-exchange for the sorting network below. */
#define CSWAP(a, b) do { \
	uint16_t lo_ = (a) < (b) ? (a) : (b), hi_ = (a) < (b) ? (b) : (a); \
	(a) = lo_; \
	(b) = hi_; \
} while (0)

/* Sort 8 ids ascending (Batcher's 19-comparator network). */
static void sort8(uint16_t *v)
{
	CSWAP(v[0], v[1]); CSWAP(v[2], v[3]); CSWAP(v[4], v[5]); CSWAP(v[6], v[7]);
	CSWAP(v[0], v[2]); CSWAP(v[1], v[3]); CSWAP(v[4], v[6]); CSWAP(v[5], v[7]);
	CSWAP(v[1], v[2]); CSWAP(v[5], v[6]); CSWAP(v[0], v[4]); CSWAP(v[3], v[7]);
	CSWAP(v[1], v[5]); CSWAP(v[2], v[6]);
	CSWAP(v[1], v[4]); CSWAP(v[3], v[6]);
	CSWAP(v[2], v[4]); CSWAP(v[3], v[5]);
	CSWAP(v[3], v[4]);
}

/* Sort one token's ids ascending, carrying gates along (stable). */
static void sort_token(uint16_t *ids, float *gates, unsigned k)
{
	unsigned i, j;

	if (k == 8 && !gates) {
		sort8(ids);
		return;
	}

	for (i = 1; i < k; i++) {
		uint16_t v = ids[i];
		float g = gates ? gates[i] : 0.0f;

		for (j = i; j > 0 && ids[j - 1] > v; j--) {
			ids[j] = ids[j - 1];
			if (gates)
				gates[j] = gates[j - 1];
		}
		ids[j] = v;
		if (gates)
			gates[j] = g;
	}
}

/*
 * Code the ids of one layer (tokens x topk, row-major, already sorted
 * when the trace is) as RANK chunks: per chunk the ids seen more often
 * than uniform, most frequent first, then each id as its rank in that
 * list followed by the unlisted ids ascending.
 */
static uint8_t *code_rank(const struct rrt_shape *s, const uint16_t *ids,
			  uint32_t tokens, uint8_t *o)
{
	uint32_t k = s->h.topk, e, experts = s->h.experts;
	uint32_t t0, c, i, n, j, thr;
	uint32_t cnt[256];
	uint8_t list[RRT_RANK_LIST_MAX], rank[256], listed[256];

	for (t0 = 0; t0 < tokens; t0 += c) {
		const uint16_t *p = ids + (size_t)t0 * k;

		c = tokens - t0 < s->chunk_tokens ? tokens - t0 : s->chunk_tokens;
		memset(cnt, 0, sizeof(cnt));
		for (i = 0; i < c * k; i++)
			cnt[p[i]]++;
		thr = c * k / experts;
		n = 0;
		for (e = 0; e < experts; e++) {
			if (cnt[e] <= thr || cnt[e] < 2)
				continue;
			/* Insert into the list, most frequent first, ties by id. */
			if (n == RRT_RANK_LIST_MAX && cnt[list[n - 1]] >= cnt[e])
				continue;
			j = n < RRT_RANK_LIST_MAX ? n++ : n - 1;
			while (j > 0 && cnt[list[j - 1]] < cnt[e]) {
				list[j] = list[j - 1];
				j--;
			}
			list[j] = (uint8_t)e;
		}
		memset(listed, 0, sizeof(listed));
		*o++ = (uint8_t)n;
		for (j = 0; j < n; j++) {
			*o++ = list[j];
			rank[list[j]] = (uint8_t)j;
			listed[list[j]] = 1;
		}
		for (e = 0, j = n; e < experts; e++)
			if (!listed[e])
				rank[e] = (uint8_t)j++;
		for (i = 0; i < c * k; i++)
			*o++ = rank[p[i]];
	}
	return o;
}

static uint64_t record_bound(const struct rrt_shape *s, uint32_t tokens)
{
	uint64_t tk = (uint64_t)tokens * s->h.topk;
	uint64_t layer = tk * s->id_bytes;

	if (s->id_coding == RRT_CODING_RANK)
		layer += (uint64_t)((tokens + s->chunk_tokens - 1) / s->chunk_tokens) *
			 (1 + RRT_RANK_LIST_MAX);
	if (s->gate_coding == RRT_GATES_F32)
		layer += tk * 4;
	return RRT_SEQ_FIXED + layer * s->h.moe_layers;
}

/* Append the coded record of seq to the frame buffer (room is reserved). */
static void code_record(struct rlb_trace_writer *w, const struct rlb_seq *seq)
{
	const struct rrt_shape *s = &w->s;
	uint32_t T = seq->tokens, K = s->h.topk, l, t, k;
	size_t tk = (size_t)T * K;
	int sorted = (s->h.flags & RLB_TRACE_F_SORTED) != 0;
	int delta = s->id_coding == RRT_CODING_DELTA;
	uint8_t *o = w->raw + w->raw_len;
	uint8_t *gplane = NULL;
	uint16_t *lay = NULL;
	float *gl = NULL;

	rlb_put_u32(o, seq->step);
	rlb_put_u32(o + 4, seq->group);
	rlb_put_u32(o + 8, seq->sample);
	rlb_put_u32(o + 12, T);
	o += RRT_SEQ_FIXED;
	/* Sorting works on a copy of one layer (room reserved by append). */
	if (sorted) {
		lay = w->lay;
		gl = seq->gates ? w->lay_gates : NULL;
	}
	for (l = 0; l < s->h.moe_layers; l++) {
		const uint16_t *src = seq->ids + (size_t)l * tk;
		const float *gsrc = seq->gates ? seq->gates + (size_t)l * tk : NULL;

		if (lay) {
			memcpy(lay, src, tk * sizeof(*lay));
			if (gl)
				memcpy(gl, gsrc, tk * sizeof(*gl));
			if (sorted)
				for (t = 0; t < T; t++)
					sort_token(lay + (size_t)t * K,
						   gl ? gl + (size_t)t * K : NULL, K);
			src = lay;
			gsrc = gl;
		}
		if (s->id_coding == RRT_CODING_RANK) {
			o = code_rank(s, src, T, o);
		} else if (s->id_bytes == 1 && !delta) {
			size_t i;

			for (i = 0; i < tk; i++)
				o[i] = (uint8_t)src[i];
			o += tk;
		} else if (s->id_bytes == 1) {
			for (t = 0; t < T; t++, o += K) {
				const uint16_t *r = src + (size_t)t * K;

				o[0] = (uint8_t)r[0];
				for (k = 1; k < K; k++)
					o[k] = (uint8_t)(r[k] - r[k - 1]);
			}
		} else {
			for (t = 0; t < T; t++) {
				const uint16_t *r = src + (size_t)t * K;

				for (k = 0; k < K; k++, o += 2)
					rlb_put_u16(o, (uint16_t)(delta && k ? r[k] - r[k - 1] : r[k]));
			}
		}
		if (gsrc) {
			size_t i;
			unsigned b;

			gplane = o;
			for (i = 0; i < tk; i++) {
				uint32_t v;

				memcpy(&v, &gsrc[i], 4);
				for (b = 0; b < 4; b++)
					gplane[b * tk + i] = (uint8_t)(v >> (8 * b));
			}
			o += 4 * tk;
		}
	}
	w->raw_len = (size_t)(o - w->raw);
}

#define SEQ_FMT "sequence (step %u, group %u, sample %u): "
#define SEQ_ARGS(q) (q)->step, (q)->group, (q)->sample

static int check_seq(struct rlb_trace_writer *w, const struct rlb_seq *q)
{
	const struct rlb_trace_header *h = &w->s.h;
	size_t n, i, per_layer;
	int bad;

	if (q->tokens == 0)
		return rlb_err_set(&w->err, RLB_EINVAL, SEQ_FMT "no tokens",
				   SEQ_ARGS(q));
	if (q->tokens > RLB_TRACE_MAX_SEQ_TOKENS)
		return rlb_err_set(&w->err, RLB_ERANGE,
				   SEQ_FMT "%u tokens exceeds the limit %u",
				   SEQ_ARGS(q), q->tokens, RLB_TRACE_MAX_SEQ_TOKENS);
	if (w->have_step && q->step < w->last_step)
		return rlb_err_set(&w->err, RLB_EINVAL,
				   SEQ_FMT "step %u after step %u (steps must not decrease)",
				   SEQ_ARGS(q), q->step, w->last_step);
	if (record_bound(&w->s, q->tokens) > RRT_MAX_FRAME_RAW)
		return rlb_err_set(&w->err, RLB_ERANGE,
				   SEQ_FMT "%llu bytes coded exceeds the frame limit %u",
				   SEQ_ARGS(q),
				   (unsigned long long)record_bound(&w->s, q->tokens),
				   RRT_MAX_FRAME_RAW);
	if (!q->ids)
		return rlb_err_set(&w->err, RLB_EINVAL, SEQ_FMT "no ids",
				   SEQ_ARGS(q));
	if ((h->flags & RLB_TRACE_F_GATES) && !q->gates)
		return rlb_err_set(&w->err, RLB_EINVAL,
				   SEQ_FMT "gates missing (the trace has gates)",
				   SEQ_ARGS(q));
	if (!(h->flags & RLB_TRACE_F_GATES) && q->gates)
		return rlb_err_set(&w->err, RLB_EINVAL,
				   SEQ_FMT "gates given but the trace has none",
				   SEQ_ARGS(q));
	n = (size_t)q->tokens * h->topk * h->moe_layers;
	per_layer = (size_t)q->tokens * h->topk;
	if (rlb_rrt_max_u16(q->ids, n) >= h->experts) {
		for (i = 0; i < n; i++) {
			if (q->ids[i] >= h->experts)
				return rlb_err_set(&w->err, RLB_ERANGE,
						   SEQ_FMT "expert id %u at layer %zu, token %zu, column %zu is out of range (experts %u)",
						   SEQ_ARGS(q), q->ids[i], i / per_layer,
						   i % per_layer / h->topk, i % h->topk,
						   h->experts);
		}
	}
	if (q->gates) {
		/* One pass without branches; the loop below only on failure. */
		for (i = 0, bad = 0; i < n; i++)
			bad |= !rlb_trace_gate_ok(q->gates[i]);
		for (i = 0; bad && i < n; i++) {
			if (!rlb_trace_gate_ok(q->gates[i]))
				return rlb_err_set(&w->err, RLB_EINVAL,
						   SEQ_FMT "gate %.9g at layer %zu, token %zu, column %zu is negative or not finite",
						   SEQ_ARGS(q), (double)q->gates[i], i / per_layer,
						   i % per_layer / h->topk, i % h->topk);
		}
	}
	return 0;
}

int rlb_trace_writer_append(struct rlb_trace_writer *w, const struct rlb_seq *seq)
{
	size_t bound, tk, index_bytes;
	int ret;

	if (!w)
		return RLB_EINVAL;
	if (w->error)
		return w->error;
	if (!seq)
		return fail(w, rlb_err_set(&w->err, RLB_EINVAL, "no sequence"));
	ret = check_seq(w, seq);
	if (ret != 0)
		return fail(w, ret);
	bound = (size_t)record_bound(&w->s, seq->tokens);
	index_bytes = RRT_I_FIXED + 4 + (w->nframes + 1) * (size_t)RRT_I_FRAME +
		      (w->nseqs + 1) * (size_t)RRT_I_SEQ;
	if (index_bytes > UINT32_MAX)
		return fail(w, rlb_err_set(&w->err, RLB_ERANGE,
					   "trace has too many sequences for its step index"));
	/* A frame holds one step and stays under the hard limit. */
	if (w->frame_seqs && (seq->step != w->frame_step ||
			      w->raw_len + bound > RRT_MAX_FRAME_RAW)) {
		ret = flush_frame(w);
		if (ret != 0)
			return fail(w, ret);
	}
	tk = (size_t)seq->tokens * w->s.h.topk;
	if (rlb_grow(&w->raw, &w->raw_cap, w->raw_len + bound, 1) != 0 ||
	    rlb_grow(&w->metas, &w->metas_cap, 3 * (w->nseqs + 1), sizeof(*w->metas)) != 0 ||
	    ((w->s.h.flags & RLB_TRACE_F_SORTED) &&
	     (rlb_grow(&w->lay, &w->lay_cap, tk, sizeof(*w->lay)) != 0 ||
	      (seq->gates && rlb_grow(&w->lay_gates, &w->lay_gates_cap, tk,
				  sizeof(*w->lay_gates)) != 0))))
		return fail(w, rlb_err_set(&w->err, RLB_ENOMEM, "out of memory"));
	code_record(w, seq);
	w->metas[3 * w->nseqs] = seq->group;
	w->metas[3 * w->nseqs + 1] = seq->sample;
	w->metas[3 * w->nseqs + 2] = seq->tokens;
	w->nseqs++;
	w->frame_step = seq->step;
	w->frame_seqs++;
	w->have_step = 1;
	w->last_step = seq->step;
	if (w->raw_len >= w->frame_bytes) {
		ret = flush_frame(w);
		if (ret != 0)
			return fail(w, ret);
	}
	return 0;
}

int rlb_trace_writer_error(const struct rlb_trace_writer *w, struct rlb_err *err)
{
	if (!w || !w->error)
		return 0;
	if (err)
		*err = w->err;
	return w->error;
}

const struct rlb_trace_header *rlb_trace_writer_header(const struct rlb_trace_writer *w)
{
	return &w->s.h;
}

/* The step index frame and the seek table that end a complete trace. */
static int write_tail(struct rlb_trace_writer *w)
{
	size_t ilen = RRT_I_FIXED + w->nframes * RRT_I_FRAME +
		      (size_t)w->nseqs * RRT_I_SEQ + 4;
	size_t slen = rlb_rrt_seek_table_bytes(w->nframes);
	uint8_t *b = malloc(8 + (ilen > slen ? ilen : slen));
	uint8_t *p;
	size_t i;
	int ret;

	if (!b)
		return rlb_err_set(&w->err, RLB_ENOMEM, "out of memory");
	p = b + 8;
	rlb_put_u32(b, RRT_INDEX_MAGIC);
	rlb_put_u32(b + 4, (uint32_t)ilen);
	memcpy(p, RRT_INDEX_ID, 8);
	rlb_put_u32(p + 8, (uint32_t)w->nframes);
	rlb_put_u32(p + 12, 0);
	rlb_put_u64(p + 16, w->nseqs);
	p += RRT_I_FIXED;
	for (i = 0; i < w->nframes; i++, p += RRT_I_FRAME) {
		rlb_put_u32(p, w->frames[i].step);
		rlb_put_u32(p + 4, w->frames[i].seqs);
	}
	for (i = 0; i < 3 * w->nseqs; i++, p += 4)
		rlb_put_u32(p, w->metas[i]);
	rlb_put_u32(p, rlb_rrt_crc32c(b + 8, ilen - 4));
	ret = write_all(w, b, 8 + ilen);
	if (ret != 0)
		goto out;

	p = rlb_rrt_seek_table_begin(b, w->nframes, 8 + rlb_rrt_header_size(&w->s.h));
	for (i = 0; i < w->nframes; i++)
		p = rlb_rrt_seek_entry_put(p, w->frames[i].csize, w->frames[i].rsize);
	rlb_rrt_seek_table_end(p, w->nframes, (uint32_t)(8 + ilen));
	ret = write_all(w, b, slen);
out:
	free(b);
	return ret;
}

static void writer_free(struct rlb_trace_writer *w)
{
	ZSTD_freeCCtx(w->cctx);
	free(w->raw);
	free(w->cbuf);
	free(w->frames);
	free(w->metas);
	free(w->lay);
	free(w->lay_gates);
	free(w);
}

int rlb_trace_writer_close(struct rlb_trace_writer *w, struct rlb_err *err)
{
	int ret;

	if (!w)
		return 0;
	ret = w->error;
	if (!ret)
		ret = flush_frame(w);
	if (!ret)
		ret = write_tail(w);
	if (ret) {
		if (err)
			*err = w->err;
		rlb_trace_writer_abort(w);
		return ret;
	}
	ret = rlb_atomic_commit(&w->af, err);
	writer_free(w);
	return ret;
}

void rlb_trace_writer_abort(struct rlb_trace_writer *w)
{
	if (!w)
		return;
	rlb_atomic_abort(&w->af);
	writer_free(w);
}
