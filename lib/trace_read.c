/*
 * trace_read.c - the trace reader: opens a trace, decodes the records of
 * its data frames into sequences, and moves its cursors (next, seek to a
 * step, the steps and their sequences).  The frames are found in
 * trace_frames.c and loaded, or read ahead, in trace_readahead.c.  Every
 * length is checked; corrupt input is an error naming its byte offset.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zstd.h>

#include "trace_read_impl.h"
#include "util.h"

/* Prefix a reader error with the trace's path; returns the code. */
static int path_err(struct rlb_trace_reader *r, struct rlb_err *err, int code)
{
	int format = code == RLB_ECORRUPT || code == RLB_ETRUNC ||
		     code == RLB_EVERSION || code == RLB_EUNSUPPORTED;

	if (err && format && err->code == code && strncmp(err->msg, "trace '", 7) != 0)
		rlb_err_prefix(err, "trace '%s'", r->path);
	return code;
}

int rlb_trace_reader_open(struct rlb_trace_reader **out, const char *path,
			  struct rlb_err *err)
{
	struct rlb_trace_reader *r;
	struct rlb_err tmp;
	uint8_t *hc = NULL;
	uint32_t hsize;
	int ret;

	if (!err)
		err = &tmp;
	*out = NULL;
	r = calloc(1, sizeof(*r));
	if (!r)
		return rlb_err_set(err, RLB_ENOMEM, "out of memory");
	r->fd = -1;
	r->path = strdup(path);
	r->dctx = rlb_rrt_dctx_new();
	if (!r->path || !r->dctx) {
		ret = rlb_err_set(err, RLB_ENOMEM, "out of memory");
		goto out;
	}
	ret = rlb_rrt_open(path, "trace", &r->fd, &r->file_bytes, err);
	if (ret)
		goto out;
	ret = rlb_rrt_read_header_frame(r->fd, r->path, r->file_bytes, "trace", RRT_H_MAX,
					&hc, &hsize, err);
	if (ret == 0)
		ret = rlb_rrt_header_decode(hc, hsize, &r->s, err);
	if (ret != 0)
		goto out;
	r->data_start = 8 + (uint64_t)hsize;
	ret = rlb_rrt_find_frames(r, err);
out:
	free(hc);
	if (ret != 0) {
		path_err(r, err, ret);
		rlb_trace_reader_free(r);
		return ret;
	}
	*out = r;
	return 0;
}

void rlb_trace_reader_free(struct rlb_trace_reader *r)
{
	if (!r)
		return;
	rlb_rrt_ra_free(r->ra);	/* its workers read the file: before close */
	if (r->fd >= 0)
		close(r->fd);
	ZSTD_freeDCtx(r->dctx);
	free(r->path);
	free(r->frames);
	free(r->metas);
	free(r->steps);
	free(r->cbuf);
	free(r->main.raw);
	free(r->scratch.raw);
	free(r->ids[0]);
	free(r->ids[1]);
	free(r->gates[0]);
	free(r->gates[1]);
	free(r);
}

const struct rlb_trace_header *rlb_trace_reader_header(const struct rlb_trace_reader *r)
{
	return &r->s.h;
}

const char *rlb_trace_reader_id_coding(const struct rlb_trace_reader *r)
{
	static const char *const names[] = { "raw", "rank", "delta" };

	return r->s.id_coding < 3 ? names[r->s.id_coding] : "unknown";
}

int rlb_trace_reader_truncated(const struct rlb_trace_reader *r)
{
	return r->truncated;
}

int rlb_trace_no_step_err(const struct rlb_trace_reader *r, const uint32_t *steps,
			  size_t nsteps, uint32_t lo, uint32_t hi, struct rlb_err *err)
{
	char range[32];

	if (nsteps == 0)
		return rlb_err_set(err, RLB_ENOTFOUND, "trace '%s' holds no step%s", r->path,
				   r->truncated ? " (it is truncated: its writer did not finish)" : "");
	if (lo == hi)	/* --steps A, also for A = UINT32_MAX */
		snprintf(range, sizeof(range), "%u", lo);
	else if (hi == UINT32_MAX)
		snprintf(range, sizeof(range), "%u:", lo);
	else
		snprintf(range, sizeof(range), "%u:%u", lo, hi);
	return rlb_err_set(err, RLB_ENOTFOUND,
			   "no step of the trace in %s (trace '%s' has steps %u..%u)",
			   range, r->path, steps[0], steps[nsteps - 1]);
}

/* Error inside a record: names the frame's offset and the sequence. */
static int rec_err(struct rlb_err *err, const struct rframe *f, uint32_t rec,
		   const char *fmt, ...) __attribute__((format(printf, 4, 5)));

static int rec_err(struct rlb_err *err, const struct rframe *f, uint32_t rec,
		   const char *fmt, ...)
{
	char msg[RLB_ERR_MSG_MAX];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	return rlb_err_set(err, RLB_ECORRUPT,
			   "data frame at offset %llu: sequence %u: %s",
			   (unsigned long long)f->off, rec, msg);
}

/* Decode one rank-coded layer; *pos advances.  Returns 0 or -1 (*why). */
static int decode_rank(const struct rrt_shape *s, const uint8_t *p, size_t len,
		       size_t *pos, uint32_t T, uint16_t *out, int decode,
		       const char **why)
{
	uint32_t K = s->h.topk, E = s->h.experts, C = s->chunk_tokens;
	uint32_t t0, c, j, n, maxn = E < 255 ? E : 255;
	uint8_t lut[256 + 64];	/* slack for rlb_rrt_rank_rest */
	size_t q = *pos, m;

	memset(lut, 0, sizeof(lut));
	for (t0 = 0; t0 < T; t0 += c) {
		c = T - t0 < C ? T - t0 : C;
		m = (size_t)c * K;
		if (q >= len) {
			*why = "rank chunk cut";
			return -1;
		}
		n = p[q++];
		if (n > maxn || len - q < n || len - q - n < m) {
			*why = "rank chunk exceeds the record";
			return -1;
		}
		if (decode) {
			const uint8_t *src = p + q + n;
			uint16_t *o = out + (size_t)t0 * K;
			uint64_t listed[4] = { 0, 0, 0, 0 };

			for (j = 0; j < n; j++) {
				uint8_t id = p[q + j];
				uint64_t bit = 1ull << (id & 63);

				if (id >= E || (listed[id >> 6] & bit)) {
					*why = "bad rank list";
					return -1;
				}
				listed[id >> 6] |= bit;
				lut[j] = id;
			}
			/* The unlisted ids follow, ascending. */
			rlb_rrt_rank_rest(listed, n, E, lut);
			if (rlb_rrt_map_u8(src, o, m, lut) >= E) {
				*why = "rank out of range";
				return -1;
			}
		}
		q += n + m;
	}
	*pos = q;
	return 0;
}

/* Decode a RAW or DELTA layer of tk ids; checks them against experts. */
static int decode_plain(const struct rrt_shape *s, const uint8_t *p,
			size_t tk, uint16_t *o, const char **why)
{
	uint32_t K = s->h.topk, E = s->h.experts;
	uint32_t mx = 0;
	size_t i, t;

	if (s->id_bytes == 1) {
		mx = s->id_coding == RRT_CODING_RAW ? rlb_rrt_widen_u8(p, o, tk) :
			rlb_rrt_undelta_u8(p, o, tk / K, K);
	} else if (s->id_coding == RRT_CODING_RAW) {
		for (i = 0; i < tk; i++) {
			o[i] = rlb_get_u16(p + 2 * i);
			mx = o[i] > mx ? o[i] : mx;
		}
	} else {
		for (t = 0; t < tk; t += K) {
			uint32_t a = 0, k;

			for (k = 0; k < K; k++) {
				a += rlb_get_u16(p + 2 * (t + k));
				o[t + k] = (uint16_t)a;
			}
			mx = a > mx ? a : mx;
		}
	}
	if (mx >= E) {
		*why = "expert id out of range";
		return -1;
	}
	return 0;
}

/*
 * In a SORTED trace each token's ids ascend; DELTA codes only such ids,
 * RAW and RANK can code any.  The first token out of order, or T.
 */
static uint32_t unsorted_token(const uint16_t *o, uint32_t T, uint32_t K)
{
	uint32_t t, k;

	for (t = 0; t < T; t++, o += K)
		for (k = 1; k < K; k++)
			if (o[k] < o[k - 1])
				return t;
	return T;
}

/*
 * Parse the next record of the cursor's frame.  With decode, the ids and
 * gates land in the reader's arrays and seq is filled; without, only the
 * record's metadata is checked and returned.
 */
static int parse_record(struct rlb_trace_reader *r, struct cursor *c,
			struct rlb_seq *seq, int decode, struct rlb_err *err)
{
	const struct rrt_shape *s = &r->s;
	struct rframe *f = &r->frames[c->cur];
	const uint8_t *p = c->raw;
	uint32_t K = s->h.topk, L = s->h.moe_layers, T, l;
	size_t pos = c->rpos, tk, need;
	const char *why = NULL;
	int b = 0;

	if (c->rlen - pos < RRT_SEQ_FIXED)
		return rec_err(err, f, c->rec, "record header cut at raw offset %zu", pos);
	memset(seq, 0, sizeof(*seq));
	seq->step = rlb_get_u32(p + pos);
	seq->group = rlb_get_u32(p + pos + 4);
	seq->sample = rlb_get_u32(p + pos + 8);
	seq->tokens = T = rlb_get_u32(p + pos + 12);
	pos += RRT_SEQ_FIXED;
	if (seq->step != f->step)
		return rec_err(err, f, c->rec, "step %u in a frame of step %u",
			       seq->step, f->step);
	if (c->cur > 0 && r->frames[c->cur - 1].step_known &&
	    seq->step < r->frames[c->cur - 1].step)
		return rec_err(err, f, c->rec, "step %u after step %u",
			       seq->step, r->frames[c->cur - 1].step);
	if (T < 1 || T > RLB_TRACE_MAX_SEQ_TOKENS)
		return rec_err(err, f, c->rec, "token count %u is out of range", T);
	if (r->has_index) {
		const struct rlb_seq_meta *m;

		if (c->rec >= f->seqs)
			return rec_err(err, f, c->rec, "more sequences than the step index lists (%u)",
				       f->seqs);
		m = &r->metas[f->first_seq + c->rec];
		if (m->group != seq->group || m->sample != seq->sample ||
		    m->tokens != T)
			return rec_err(err, f, c->rec,
				       "does not match the step index (group %u, sample %u, %u tokens)",
				       m->group, m->sample, m->tokens);
	}
	tk = (size_t)T * K;
	need = tk * s->id_bytes + (s->gate_coding ? 4 * tk : 0);
	if ((c->rlen - pos) / L < need)
		return rec_err(err, f, c->rec, "%u tokens do not fit in the frame", T);
	if (decode) {
		b = r->buf ^ 1;
		if (rlb_grow(&r->ids[b], &r->ids_cap[b], tk * L, sizeof(*r->ids[b])) != 0 ||
		    (s->gate_coding &&
		     rlb_grow(&r->gates[b], &r->gates_cap[b], tk * L, sizeof(*r->gates[b])) != 0))
			return rlb_err_set(err, RLB_ENOMEM, "out of memory");
		r->buf = b;
	}
	for (l = 0; l < L; l++) {
		uint16_t *o = decode ? r->ids[b] + (size_t)l * tk : NULL;

		if (s->id_coding == RRT_CODING_RANK) {
			if (decode_rank(s, p, c->rlen, &pos, T, o, decode, &why) != 0)
				return rec_err(err, f, c->rec, "layer %u: %s", l, why);
		} else {
			if (c->rlen - pos < tk * s->id_bytes)
				return rec_err(err, f, c->rec, "layer %u: ids cut", l);
			if (decode && decode_plain(s, p + pos, tk, o, &why) != 0)
				return rec_err(err, f, c->rec, "layer %u: %s", l, why);
			pos += tk * s->id_bytes;
		}
		if (decode && (s->h.flags & RLB_TRACE_F_SORTED) &&
		    s->id_coding != RRT_CODING_DELTA) {
			uint32_t t = unsorted_token(o, T, K);

			if (t < T)
				return rec_err(err, f, c->rec,
					       "layer %u, token %u: ids not ascending in a sorted trace",
					       l, t);
		}
		if (s->gate_coding) {
			if (c->rlen - pos < 4 * tk)
				return rec_err(err, f, c->rec, "layer %u: gates cut", l);
			if (decode) {
				const uint8_t *g = p + pos;
				float *go = r->gates[b] + (size_t)l * tk;
				uint32_t bad = 0;
				size_t i;

				for (i = 0; i < tk; i++) {
					uint32_t v = (uint32_t)g[i] | ((uint32_t)g[tk + i] << 8) |
						     ((uint32_t)g[2 * tk + i] << 16) |
						     ((uint32_t)g[3 * tk + i] << 24);

					/*
					 * Finite and >= 0 (rlb_trace_gate_ok) on the
					 * bits, without a branch: up to FLT_MAX, or -0.
					 */
					bad |= (v > 0x7f7fffffu) & (v != 0x80000000u);
					memcpy(&go[i], &v, 4);
				}
				for (i = 0; bad && i < tk; i++)
					if (!rlb_trace_gate_ok(go[i]))
						return rec_err(err, f, c->rec,
							       "layer %u, token %zu, column %zu: gate %.9g is negative or not finite",
							       l, i / K, i % K, (double)go[i]);
			}
			pos += 4 * tk;
		}
	}
	if (decode) {
		seq->ids = r->ids[b];
		seq->gates = s->gate_coding ? r->gates[b] : NULL;
	}
	c->rpos = pos;
	c->rec++;
	return 0;
}

/*
 * Advance a cursor: 1 with *seq filled, 0 at the end, negative on error.
 * Errors are sticky for the cursor until it is repositioned.
 */
static int cursor_next(struct rlb_trace_reader *r, struct cursor *c,
		       struct rlb_seq *seq, int decode, size_t stop_frame,
		       struct rlb_err *err)
{
	int ret;

	if (c->code) {
		*err = c->err;
		return c->code;
	}
	for (;;) {
		if (c->loaded && c->rpos < c->rlen)
			break;
		if (c->loaded) {
			struct rframe *f = &r->frames[c->cur];

			if (r->has_index && c->rec != f->seqs) {
				ret = rec_err(err, f, c->rec,
					      "frame ends early: the step index lists %u sequences",
					      f->seqs);
				goto fail;
			}
			c->loaded = 0;
			c->cur++;
		}
		if (c->cur >= r->nframes || c->cur >= stop_frame) {
			if (r->scan_code && c->cur >= r->nframes) {
				*err = r->scan_err;
				ret = r->scan_code;
				goto fail;
			}
			return 0;
		}
		ret = rlb_rrt_load_frame(r, c, c->cur, stop_frame, err);
		if (ret != 0)
			goto fail;
	}
	ret = parse_record(r, c, seq, decode, err);
	if (ret != 0)
		goto fail;
	return 1;
fail:
	c->code = ret;
	c->err = *err;
	return ret;
}

static void cursor_seek(struct cursor *c, size_t frame)
{
	c->cur = frame;
	c->loaded = 0;
	c->code = 0;
	rlb_err_clear(&c->err);
}

/* Learn every frame's step (decoding frames when there is no index). */
/*
 * The step of frame i without decoding the whole frame: its first record
 * starts with the step (u32), so the frame header and first block are
 * enough.  The frame's checksum is verified when it is read.  A first
 * block of under 4 bytes (no writer makes one) falls back to
 * rlb_rrt_load_frame.
 */
static int peek_step(struct rlb_trace_reader *r, size_t i, struct rlb_err *err)
{
	struct rframe *f = &r->frames[i];
	uint8_t hb[18 + 3], out[4];	/* the largest frame header, a block header */
	struct fhdr fh;
	const char *why = NULL;
	uint32_t last, skip, bb;
	size_t n = f->csize < sizeof(hb) ? f->csize : sizeof(hb), len, zret;
	ZSTD_inBuffer in;
	ZSTD_outBuffer o = { out, sizeof(out), 0 };
	int ret;

	ret = rrt_read_at(r, f->off, hb, n, err);
	if (ret != 0)
		return ret;
	if (rlb_rrt_parse_fhdr(hb, n, &fh, &why) != 0 || fh.size + 3 > n)
		return rlb_rrt_at_err(err, RLB_ECORRUPT, "data frame", f->off,
				      "bad frame header");
	if (rlb_rrt_block_info(hb + fh.size, &last, &skip, &bb, &why) != 0 ||
	    fh.size + 3 + skip > f->csize)
		return rlb_rrt_at_err(err, RLB_ECORRUPT, "data frame", f->off,
				      "bad first block");
	len = fh.size + 3 + skip;
	if (rlb_grow(&r->cbuf, &r->ccap, len, 1) != 0)
		return rlb_err_set(err, RLB_ENOMEM, "out of memory");
	ret = rrt_read_at(r, f->off, r->cbuf, len, err);
	if (ret != 0)
		return ret;
	in.src = r->cbuf;
	in.size = len;
	in.pos = 0;
	ZSTD_DCtx_reset(r->dctx, ZSTD_reset_session_only);
	zret = ZSTD_decompressStream(r->dctx, &o, &in);
	ZSTD_DCtx_reset(r->dctx, ZSTD_reset_session_only);
	if (ZSTD_isError(zret))
		return rlb_rrt_at_err(err, RLB_ECORRUPT, "data frame", f->off,
				      "corrupt zstd data (%s)", ZSTD_getErrorName(zret));
	if (o.pos < sizeof(out)) {
		cursor_seek(&r->scratch, i);
		ret = rlb_rrt_load_frame(r, &r->scratch, i, SIZE_MAX, err);
		r->scratch.loaded = 0;
		return ret;
	}
	f->step = rlb_get_u32(out);
	f->step_known = 1;
	return 0;
}

static int ensure_steps(struct rlb_trace_reader *r, struct rlb_err *err)
{
	size_t i, n = 0;
	int ret;

	if (r->steps_ready)
		return 0;
	for (i = 0; i < r->nframes; i++) {
		if (!r->frames[i].step_known) {
			ret = peek_step(r, i, err);
			if (ret != 0)
				return ret;
		}
		if (i && r->frames[i].step < r->frames[i - 1].step)
			return rlb_rrt_at_err(err, RLB_ECORRUPT, "data frame", r->frames[i].off,
				      "step %u after step %u", r->frames[i].step,
				      r->frames[i - 1].step);
	}
	if (r->scan_code) {
		*err = r->scan_err;
		return r->scan_code;
	}
	r->steps = malloc((r->nframes ? r->nframes : 1) * sizeof(*r->steps));
	if (!r->steps)
		return rlb_err_set(err, RLB_ENOMEM, "out of memory");
	for (i = 0; i < r->nframes; i++)
		if (n == 0 || r->steps[n - 1] != r->frames[i].step)
			r->steps[n++] = r->frames[i].step;
	r->nsteps = n;
	r->steps_ready = 1;
	return 0;
}

int rlb_trace_reader_steps(struct rlb_trace_reader *r, const uint32_t **steps,
			   size_t *nsteps, struct rlb_err *err)
{
	struct rlb_err tmp;
	int ret;

	if (!err)
		err = &tmp;
	ret = ensure_steps(r, err);
	if (ret != 0)
		return path_err(r, err, ret);
	*steps = r->steps;
	*nsteps = r->nsteps;
	return 0;
}

/* First frame of step, or nframes. */
static size_t find_step(const struct rlb_trace_reader *r, uint32_t step)
{
	size_t lo = 0, hi = r->nframes;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (r->frames[mid].step < step)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo < r->nframes && r->frames[lo].step == step ? lo : r->nframes;
}

/* The first frame of STEP into *first, learning the steps if need be. */
static int locate_step(struct rlb_trace_reader *r, uint32_t step, size_t *first,
		       struct rlb_err *err)
{
	int ret = ensure_steps(r, err);

	if (ret != 0)
		return path_err(r, err, ret);
	*first = find_step(r, step);
	if (*first == r->nframes)
		return rlb_err_set(err, RLB_ENOTFOUND,
				   "trace '%s': step %u is not in the trace",
				   r->path, step);
	return 0;
}

int rlb_trace_reader_step_seqs(struct rlb_trace_reader *r, uint32_t step,
			       struct rlb_seq_meta **metas, size_t *n,
			       struct rlb_err *err)
{
	struct rlb_seq_meta *m = NULL;
	size_t cap = 0, cnt = 0, first, end;
	struct rlb_err tmp;
	struct rlb_seq seq;
	int ret;

	if (!err)
		err = &tmp;
	*metas = NULL;
	*n = 0;
	ret = locate_step(r, step, &first, err);
	if (ret != 0)
		return ret;
	for (end = first; end < r->nframes && r->frames[end].step == step; end++)
		;
	if (r->has_index) {
		uint64_t a = r->frames[first].first_seq;
		uint64_t b = r->frames[end - 1].first_seq + r->frames[end - 1].seqs;

		m = malloc((size_t)(b - a) * sizeof(*m));
		if (!m)
			return rlb_err_set(err, RLB_ENOMEM, "out of memory");
		memcpy(m, r->metas + a, (size_t)(b - a) * sizeof(*m));
		*metas = m;
		*n = (size_t)(b - a);
		return 0;
	}
	cursor_seek(&r->scratch, first);
	while ((ret = cursor_next(r, &r->scratch, &seq, 0, end, err)) == 1) {
		if (rlb_grow(&m, &cap, cnt + 1, sizeof(*m)) != 0) {
			ret = rlb_err_set(err, RLB_ENOMEM, "out of memory");
			break;
		}
		m[cnt].step = seq.step;
		m[cnt].group = seq.group;
		m[cnt].sample = seq.sample;
		m[cnt].tokens = seq.tokens;
		cnt++;
	}
	r->scratch.loaded = 0;
	if (ret < 0) {
		free(m);
		return path_err(r, err, ret);
	}
	*metas = m;
	*n = cnt;
	return 0;
}

int rlb_trace_reader_seek_step(struct rlb_trace_reader *r, uint32_t step,
			       struct rlb_err *err)
{
	struct rlb_err tmp;
	size_t i;
	int ret;

	ret = locate_step(r, step, &i, err ? err : &tmp);
	if (ret == 0)
		cursor_seek(&r->main, i);
	return ret;
}

int rlb_trace_reader_rewind(struct rlb_trace_reader *r, struct rlb_err *err)
{
	(void)err;
	cursor_seek(&r->main, 0);
	return 0;
}

int rlb_trace_reader_next(struct rlb_trace_reader *r, struct rlb_seq *seq,
			  struct rlb_err *err)
{
	struct rlb_err tmp;
	int ret;

	if (!err)
		err = &tmp;
	ret = cursor_next(r, &r->main, seq, 1, SIZE_MAX, err);
	if (ret < 0)
		return path_err(r, err, ret);
	return ret;
}

int rlb_trace_verify(const char *path, struct rlb_trace_info *info,
		     struct rlb_err *err)
{
	return rlb_trace_verify_threads(path, 1, info, err);
}

int rlb_trace_verify_threads(const char *path, unsigned threads,
			     struct rlb_trace_info *info, struct rlb_err *err)
{
	struct rlb_trace_reader *r = NULL;
	struct rlb_trace_info mine;
	struct rlb_err tmp;
	struct rlb_seq seq;
	struct stat st;
	size_t done = 0;
	uint64_t id_per_token;
	int ret, have = 0;
	uint32_t last = 0;

	if (!err)
		err = &tmp;
	if (!info)
		info = &mine;
	memset(info, 0, sizeof(*info));
	if (stat(path, &st) == 0)
		info->file_bytes = (uint64_t)st.st_size;
	ret = rlb_trace_reader_open(&r, path, err);
	if (ret == 0)
		ret = rlb_trace_reader_set_threads(r, threads, err);
	if (ret != 0) {
		rlb_trace_reader_free(r);
		return ret;
	}
	info->has_seek_table = r->has_seek;
	info->has_step_index = r->has_index;
	info->truncated = r->truncated;
	info->valid_bytes = r->data_start;
	id_per_token = (uint64_t)r->s.h.topk * r->s.h.moe_layers * r->s.id_bytes;
	while ((ret = cursor_next(r, &r->main, &seq, 1, SIZE_MAX, err)) == 1) {
		/* Count frames as they are passed completely. */
		while (done < r->main.cur) {
			info->frames++;
			info->raw_bytes += r->frames[done].rsize;
			info->valid_bytes = r->frames[done].off + r->frames[done].csize;
			done++;
		}
		info->sequences++;
		info->tokens += seq.tokens;
		info->raw_id_bytes += seq.tokens * id_per_token;
		if (!have || seq.step != last)
			info->steps++;
		if (!have)
			info->first_step = seq.step;
		info->last_step = seq.step;
		have = 1;
		last = seq.step;
	}
	while (ret < 0 && done < r->main.cur) {
		info->frames++;
		info->raw_bytes += r->frames[done].rsize;
		info->valid_bytes = r->frames[done].off + r->frames[done].csize;
		done++;
	}
	if (ret == 0) {
		info->frames = r->nframes;
		info->raw_bytes = 0;
		for (done = 0; done < r->nframes; done++)
			info->raw_bytes += r->frames[done].rsize;
		info->valid_bytes = r->valid_bytes;
	} else {
		path_err(r, err, ret);
	}
	rlb_trace_reader_free(r);
	return ret;
}
