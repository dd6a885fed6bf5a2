/*
 * test_trace.c - unit tests of lib/trace: round trips over every id
 * width and coding, seeking, append validation, and robustness (cut at
 * every offset, every byte flipped, writers killed with SIGKILL).
 */
#include <errno.h>
#include <float.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <zstd.h>

#include "relibra.h"
#include "suites.h"
#include "trace_impl.h"

/* ---- test data ---- */

struct tseq {
	struct rlb_seq s;
	uint16_t *ids;
	float *gates;
};

struct tdata {
	struct rlb_trace_header h;
	struct tseq *seqs;
	size_t n;
};

static uint64_t rng_state = 1;

static uint32_t rng(void)
{
	rng_state ^= rng_state << 13;
	rng_state ^= rng_state >> 7;
	rng_state ^= rng_state << 17;
	return (uint32_t)(rng_state >> 16);
}

static void make_header(struct rlb_trace_header *h, uint32_t experts,
			uint32_t topk, uint32_t layers, uint32_t flags)
{
	memset(h, 0, sizeof(*h));
	h->experts = experts;
	h->topk = topk;
	h->moe_layers = layers;
	h->flags = flags;
	h->first_dense_layers = 1;
	h->seed = 0x1234567890abcdefull;
	strcpy(h->model, "test-model");
	strcpy(h->source, "api");
}

/*
 * Fill one sequence with segment-correlated ids (a small local set most
 * of the time), distinct within each token when topk allows.
 */
static void fill_seq(struct tseq *q, const struct rlb_trace_header *h)
{
	uint32_t L = h->moe_layers, K = h->topk, E = h->experts, T = q->s.tokens;
	uint32_t l, t, k, j, local[16], nlocal = E < 16 ? E : 16;
	size_t n = (size_t)L * T * K, i;

	q->ids = malloc(n * sizeof(*q->ids));
	q->gates = (h->flags & RLB_TRACE_F_GATES) ? malloc(n * sizeof(*q->gates)) : NULL;
	ck_assert_ptr_nonnull(q->ids);
	for (l = 0; l < L; l++) {
		for (t = 0; t < T; t++) {
			uint16_t *row = q->ids + ((size_t)l * T + t) * K;

			if (t % 40 == 0)
				for (j = 0; j < nlocal; j++)
					local[j] = rng() % E;
			for (k = 0; k < K; k++) {
				uint32_t e, tries = 0;
				int dup;

				do {
					e = (rng() % 4) ? local[rng() % nlocal] : rng() % E;
					dup = 0;
					for (j = 0; j < k; j++)
						dup |= row[j] == e;
				} while (dup && ++tries < 1000);
				if (dup)	/* fall back to the first free id */
					for (e = 0; e < E; e++) {
						for (dup = 0, j = 0; j < k; j++)
							dup |= row[j] == e;
						if (!dup)
							break;
					}
				row[k] = (uint16_t)e;
			}
		}
	}
	if (q->gates)
		for (i = 0; i < n; i++)
			q->gates[i] = (float)(rng() % 100000) / 100000.0f;
	q->s.ids = q->ids;
	q->s.gates = q->gates;
}

/* n sequences, a new step every `per_step`, token counts from lens (cycled). */
static void tdata_gen(struct tdata *d, const struct rlb_trace_header *h,
		      size_t n, size_t per_step, const uint32_t *lens,
		      size_t nlens, uint64_t seed)
{
	size_t i;

	rng_state = seed;
	d->h = *h;
	d->n = n;
	d->seqs = calloc(n ? n : 1, sizeof(*d->seqs));
	ck_assert_ptr_nonnull(d->seqs);
	for (i = 0; i < n; i++) {
		struct tseq *q = &d->seqs[i];

		q->s.step = 3 + (uint32_t)(i / per_step) * 2;
		q->s.group = (uint32_t)(i % 3);
		q->s.sample = (uint32_t)i;
		q->s.tokens = lens[i % nlens];
		fill_seq(q, h);
	}
}

static void tdata_free(struct tdata *d)
{
	size_t i;

	for (i = 0; i < d->n; i++) {
		free(d->seqs[i].ids);
		free(d->seqs[i].gates);
	}
	free(d->seqs);
	memset(d, 0, sizeof(*d));
}

/* What a reader must return for token (l, t) of sequence i. */
static void expected_token(const struct tdata *d, size_t i, uint32_t l,
			   uint32_t t, uint16_t *ids, float *gates)
{
	const struct tseq *q = &d->seqs[i];
	uint32_t K = d->h.topk, a, b;
	size_t off = ((size_t)l * q->s.tokens + t) * K;

	memcpy(ids, q->ids + off, K * sizeof(*ids));
	if (q->gates)
		memcpy(gates, q->gates + off, K * sizeof(*gates));
	if (!(d->h.flags & RLB_TRACE_F_SORTED))
		return;
	for (a = 1; a < K; a++) {
		uint16_t v = ids[a];
		float g = q->gates ? gates[a] : 0;

		for (b = a; b > 0 && ids[b - 1] > v; b--) {
			ids[b] = ids[b - 1];
			if (q->gates)
				gates[b] = gates[b - 1];
		}
		ids[b] = v;
		if (q->gates)
			gates[b] = g;
	}
}

/* 1 when the sequence read equals the original i. */
static int seq_equal(const struct tdata *d, size_t i, const struct rlb_seq *r)
{
	const struct tseq *q = &d->seqs[i];
	uint32_t K = d->h.topk, l, t;
	uint16_t ids[RLB_TRACE_MAX_TOPK];
	float g[RLB_TRACE_MAX_TOPK];

	if (r->step != q->s.step || r->group != q->s.group ||
	    r->sample != q->s.sample || r->tokens != q->s.tokens)
		return 0;
	if ((r->gates != NULL) != (q->gates != NULL))
		return 0;
	for (l = 0; l < d->h.moe_layers; l++) {
		for (t = 0; t < q->s.tokens; t++) {
			size_t off = ((size_t)l * q->s.tokens + t) * K;

			expected_token(d, i, l, t, ids, g);
			if (memcmp(ids, r->ids + off, K * sizeof(*ids)) != 0)
				return 0;
			if (q->gates && memcmp(g, r->gates + off, K * sizeof(*g)) != 0)
				return 0;
		}
	}
	return 1;
}

static void tpath(char *buf, size_t n, const char *name)
{
	snprintf(buf, n, "%s/trace-%ld-%s", rlb_test_tmpdir(), (long)getpid(), name);
}

static void write_trace(const char *path, const struct tdata *d,
			size_t frame_bytes, int coding)
{
	struct rlb_trace_writer_opts o = { .level = 3, .frame_bytes = frame_bytes,
					   .coding = coding };
	struct rlb_trace_writer *w;
	struct rlb_err err = {0};
	size_t i;

	ck_assert_msg(rlb_trace_writer_open(&w, path, &d->h, &o, &err) == 0,
		      "open: %s", err.msg);
	for (i = 0; i < d->n; i++)
		ck_assert_msg(rlb_trace_writer_append(w, &d->seqs[i].s) == 0,
			      "append %zu: %d", i, rlb_trace_writer_error(w, &err));
	ck_assert_msg(rlb_trace_writer_close(w, &err) == 0, "close: %s", err.msg);
}

/* Read the whole trace and compare with the originals. */
static void read_compare_minor(const char *path, const struct tdata *d,
			       unsigned minor)
{
	struct rlb_trace_reader *r;
	struct rlb_err err = {0};
	struct rlb_seq s;
	size_t i = 0;
	int rc;
	const struct rlb_trace_header *h;

	ck_assert_msg(rlb_trace_reader_open(&r, path, &err) == 0, "open: %s", err.msg);
	h = rlb_trace_reader_header(r);
	ck_assert_uint_eq(h->version_major, RLB_TRACE_VERSION_MAJOR);
	ck_assert_uint_eq(h->version_minor, minor);
	ck_assert_uint_eq(h->flags, d->h.flags);
	ck_assert_uint_eq(h->experts, d->h.experts);
	ck_assert_uint_eq(h->topk, d->h.topk);
	ck_assert_uint_eq(h->moe_layers, d->h.moe_layers);
	ck_assert_uint_eq(h->first_dense_layers, d->h.first_dense_layers);
	ck_assert_uint_eq(h->moe_layer_period, d->h.moe_layer_period > 1 ? d->h.moe_layer_period : 1);
	ck_assert_uint_eq(h->moe_layer_offset, d->h.moe_layer_offset);
	ck_assert_str_eq(h->layer_pattern, d->h.layer_pattern);
	ck_assert(h->seed == d->h.seed);
	ck_assert_str_eq(h->model, d->h.model);
	ck_assert_str_eq(h->source, d->h.source);
	ck_assert_int_eq(rlb_trace_reader_truncated(r), 0);
	while ((rc = rlb_trace_reader_next(r, &s, &err)) == 1) {
		ck_assert_uint_lt(i, d->n);
		ck_assert_msg(seq_equal(d, i, &s), "sequence %zu differs", i);
		i++;
	}
	ck_assert_msg(rc == 0, "next: %s", err.msg);
	ck_assert_uint_eq(i, d->n);
	/* A second pass after rewind gives the same. */
	ck_assert_int_eq(rlb_trace_reader_rewind(r, &err), 0);
	if (d->n) {
		ck_assert_int_eq(rlb_trace_reader_next(r, &s, &err), 1);
		ck_assert(seq_equal(d, 0, &s));
	}
	rlb_trace_reader_free(r);
}

static void read_compare(const char *path, const struct tdata *d)
{
	/* 1.1 only for interleaved layers, 1.2 for a layer pattern (section 3) */
	read_compare_minor(path, d, d->h.layer_pattern[0] ? 2 : d->h.moe_layer_period > 1 ? 1 : 0);
}

/* ---- tests ---- */

START_TEST(test_crc32c)
{
	/* The standard check value of CRC-32C. */
	ck_assert_uint_eq(rlb_rrt_crc32c("123456789", 9), 0xE3069283u);
	ck_assert_uint_eq(rlb_rrt_crc32c_update(rlb_rrt_crc32c("1234", 4), "56789", 5),
			  0xE3069283u);
	ck_assert_uint_eq(rlb_rrt_crc32c("", 0), 0);
}
END_TEST

START_TEST(test_id_bytes_and_config)
{
	struct rlb_trace_header h;
	struct rlb_config cfg;
	struct rlb_err err = {0};

	make_header(&h, 256, 8, 4, 0);
	ck_assert_uint_eq(rlb_trace_id_bytes(&h), 1);
	h.experts = 257;
	ck_assert_uint_eq(rlb_trace_id_bytes(&h), 2);

	memset(&cfg, 0, sizeof(cfg));
	strcpy(cfg.model.name, "deepseek-v3");
	cfg.model.experts = 256;
	cfg.model.topk = 8;
	cfg.model.moe_layers = 58;
	cfg.model.first_dense_layers = 3;
	rlb_trace_header_from_config(&h, &cfg);
	ck_assert_uint_eq(h.experts, 256);
	ck_assert_uint_eq(h.topk, 8);
	ck_assert_uint_eq(h.moe_layers, 58);
	ck_assert_uint_eq(h.first_dense_layers, 3);
	ck_assert_uint_eq(h.moe_layer_period, 1);	/* 0 in the config: not interleaved */
	ck_assert_uint_eq(h.moe_layer_offset, 0);
	ck_assert_uint_eq(h.flags, 0);
	ck_assert_str_eq(h.model, "deepseek-v3");
	ck_assert_str_eq(h.source, "");

	/* The interleaved layout is part of the shape a config must match. */
	cfg.model.moe_layer_period = 2;
	cfg.model.moe_layer_offset = 1;
	rlb_trace_header_from_config(&h, &cfg);
	ck_assert_uint_eq(h.moe_layer_period, 2);
	ck_assert_uint_eq(h.moe_layer_offset, 1);
	ck_assert_int_eq(rlb_trace_header_check(&h, &cfg, &err), 0);
	cfg.model.moe_layer_offset = 0;
	ck_assert_int_eq(rlb_trace_header_check(&h, &cfg, &err), RLB_EMISMATCH);
	ck_assert_str_eq(err.msg, "the config does not match the trace: "
			 "'model.moe_layer_offset' is 0 in the config, 1 in the trace");
	cfg.model.moe_layer_period = 1;
	ck_assert_int_eq(rlb_trace_header_check(&h, &cfg, &err), RLB_EMISMATCH);
	ck_assert_str_eq(err.msg, "the config does not match the trace: "
			 "'model.moe_layer_period' is 1 in the config, 2 in the trace");
}
END_TEST

struct shape_case {
	uint32_t experts, topk, layers, flags;
	int coding;
	size_t frame_bytes;
};

static const struct shape_case shapes[] = {
	{ 16, 2, 4, 0, 0, 512 },				/* u8, rank */
	{ 16, 2, 4, RLB_TRACE_F_GATES, 0, 700 },		/* u8, rank, gates */
	{ 256, 8, 2, 0, 0, 4096 },				/* u8, rank at 256 experts */
	{ 128, 8, 3, RLB_TRACE_F_SORTED, 0, 2000 },		/* u8, delta */
	{ 128, 8, 3, RLB_TRACE_F_SORTED, RLB_TRACE_CODING_RAW, 0 },
	{ 128, 8, 3, RLB_TRACE_F_SORTED | RLB_TRACE_F_GATES, RLB_TRACE_CODING_RANK, 0 },
	{ 16, 2, 4, 0, RLB_TRACE_CODING_RAW, 300 },		/* u8, raw */
	{ 300, 3, 2, 0, 0, 1000 },				/* u16, raw */
	{ 300, 3, 2, RLB_TRACE_F_GATES | RLB_TRACE_F_SORTED, 0, 1000 },
	{ 65535, 4, 1, 0, 0, 0 },				/* widest ids */
	{ 1, 1, 1, 0, 0, 64 },					/* one expert */
};

START_TEST(test_roundtrip)
{
	static const uint32_t lens[] = { 1, 7, 128, 129, 300, 2, 40, 257 };
	const struct shape_case *c = &shapes[_i];
	struct rlb_trace_header h;
	struct rlb_trace_info info;
	struct rlb_err err = {0};
	struct tdata d;
	char path[512];
	uint64_t tokens = 0;
	size_t i;

	make_header(&h, c->experts, c->topk, c->layers, c->flags);
	tdata_gen(&d, &h, 14, 3, lens, 8, 77 + (uint64_t)_i);
	tpath(path, sizeof(path), "rt.rrt");
	write_trace(path, &d, c->frame_bytes, c->coding);
	read_compare(path, &d);
	/* The plain C decoding kernels give the same. */
	rlb_rrt_simd = 0;
	read_compare(path, &d);
	rlb_rrt_simd = 1;
	ck_assert_msg(rlb_trace_verify(path, &info, &err) == 0, "verify: %s", err.msg);
	for (i = 0; i < d.n; i++)
		tokens += d.seqs[i].s.tokens;
	ck_assert_uint_eq(info.sequences, d.n);
	ck_assert_uint_eq(info.tokens, tokens);
	ck_assert_uint_eq(info.steps, 5);
	ck_assert_uint_eq(info.raw_id_bytes,
			  tokens * c->topk * c->layers * rlb_trace_id_bytes(&h));
	ck_assert_int_eq(info.has_seek_table, 1);
	ck_assert_int_eq(info.has_step_index, 1);
	ck_assert_int_eq(info.truncated, 0);
	ck_assert_uint_eq(info.valid_bytes, info.file_bytes);
	ck_assert_uint_ge(info.frames, 5);	/* frames never span steps */
	if (c->frame_bytes && c->frame_bytes < 1000)
		ck_assert_uint_gt(info.frames, 5);	/* steps split over frames */
	ck_assert_int_eq(access(path, F_OK), 0);
	{
		char tmp[600];

		snprintf(tmp, sizeof(tmp), "%s.tmp", path);
		ck_assert_int_ne(access(tmp, F_OK), 0);
	}
	unlink(path);
	tdata_free(&d);
}
END_TEST

START_TEST(test_many_steps_and_seek)
{
	static const uint32_t lens[] = { 3, 50, 200 };
	struct rlb_trace_header h;
	struct rlb_trace_reader *r;
	struct rlb_err err = {0};
	struct rlb_seq s;
	struct tdata d;
	const uint32_t *steps;
	size_t nsteps, i, j;
	char path[512];

	make_header(&h, 64, 4, 3, RLB_TRACE_F_GATES);
	tdata_gen(&d, &h, 60, 2, lens, 3, 5);
	tpath(path, sizeof(path), "steps.rrt");
	write_trace(path, &d, 256, 0);
	read_compare(path, &d);
	ck_assert_int_eq(rlb_trace_reader_open(&r, path, &err), 0);
	ck_assert_int_eq(rlb_trace_reader_steps(r, &steps, &nsteps, &err), 0);
	ck_assert_uint_eq(nsteps, 30);
	/* Seek to every step, backwards, and read exactly its sequences. */
	for (j = nsteps; j-- > 0;) {
		ck_assert_uint_eq(steps[j], 3 + 2 * j);
		ck_assert_int_eq(rlb_trace_reader_seek_step(r, steps[j], &err), 0);
		for (i = 2 * j; i < 2 * j + 2; i++) {
			ck_assert_int_eq(rlb_trace_reader_next(r, &s, &err), 1);
			ck_assert_msg(seq_equal(&d, i, &s), "step %u seq %zu", steps[j], i);
		}
		if (j + 1 < nsteps) {
			ck_assert_int_eq(rlb_trace_reader_next(r, &s, &err), 1);
			ck_assert_uint_eq(s.step, steps[j + 1]);
		} else {
			ck_assert_int_eq(rlb_trace_reader_next(r, &s, &err), 0);
		}
	}
	ck_assert_int_eq(rlb_trace_reader_seek_step(r, 4, &err), RLB_ENOTFOUND);
	ck_assert_msg(strstr(err.msg, "step 4 is not in the trace") != NULL, "%s", err.msg);
	/* The failed seek leaves the position alone (step 5, second sequence). */
	ck_assert_int_eq(rlb_trace_reader_next(r, &s, &err), 1);
	ck_assert(seq_equal(&d, 3, &s));
	rlb_trace_reader_free(r);
	unlink(path);
	tdata_free(&d);
}
END_TEST

/* step_seqs and seeking with the step index, without it, and without the seek table. */
static void check_step_seqs(const char *path, const struct tdata *d,
			    int expect_truncated)
{
	struct rlb_trace_reader *r;
	struct rlb_seq_meta *m;
	struct rlb_err err = {0};
	struct rlb_seq s;
	const uint32_t *steps;
	size_t n, nsteps, i, j, k;

	ck_assert_msg(rlb_trace_reader_open(&r, path, &err) == 0, "%s", err.msg);
	ck_assert_int_eq(rlb_trace_reader_truncated(r), expect_truncated);
	ck_assert_msg(rlb_trace_reader_steps(r, &steps, &nsteps, &err) == 0, "%s", err.msg);
	for (j = 0, k = 0; j < nsteps; j++) {
		ck_assert_msg(rlb_trace_reader_step_seqs(r, steps[j], &m, &n, &err) == 0,
			      "%s", err.msg);
		for (i = 0; i < n; i++, k++) {
			ck_assert_uint_eq(m[i].step, d->seqs[k].s.step);
			ck_assert_uint_eq(m[i].group, d->seqs[k].s.group);
			ck_assert_uint_eq(m[i].sample, d->seqs[k].s.sample);
			ck_assert_uint_eq(m[i].tokens, d->seqs[k].s.tokens);
		}
		free(m);
	}
	ck_assert_uint_eq(k, d->n);
	ck_assert_int_eq(rlb_trace_reader_step_seqs(r, 1000, &m, &n, &err), RLB_ENOTFOUND);
	ck_assert_ptr_null(m);
	/* step_seqs does not move the reading position. */
	ck_assert_int_eq(rlb_trace_reader_seek_step(r, steps[1], &err), 0);
	ck_assert_int_eq(rlb_trace_reader_step_seqs(r, steps[0], &m, &n, &err), 0);
	free(m);
	ck_assert_int_eq(rlb_trace_reader_next(r, &s, &err), 1);
	ck_assert_uint_eq(s.step, steps[1]);
	rlb_trace_reader_free(r);
}

/* Copy the first n bytes of src to dst. */
static void copy_prefix(const char *src, const char *dst, size_t n)
{
	FILE *in = fopen(src, "rb"), *out = fopen(dst, "wb");
	char *buf = malloc(n ? n : 1);

	ck_assert_ptr_nonnull(in);
	ck_assert_ptr_nonnull(out);
	ck_assert_uint_eq(fread(buf, 1, n, in), n);
	ck_assert_uint_eq(fwrite(buf, 1, n, out), n);
	fclose(in);
	fclose(out);
	free(buf);
}

static uint8_t *slurp(const char *path, size_t *n)
{
	FILE *f = fopen(path, "rb");
	uint8_t *b;
	long len;

	ck_assert_ptr_nonnull(f);
	fseek(f, 0, SEEK_END);
	len = ftell(f);
	fseek(f, 0, SEEK_SET);
	b = malloc(len ? (size_t)len : 1);
	ck_assert_uint_eq(fread(b, 1, (size_t)len, f), (size_t)len);
	fclose(f);
	*n = (size_t)len;
	return b;
}

static void spit(const char *path, const uint8_t *b, size_t n)
{
	FILE *f = fopen(path, "wb");

	ck_assert_ptr_nonnull(f);
	ck_assert_uint_eq(fwrite(b, 1, n, f), n);
	ck_assert_int_eq(fclose(f), 0);
}

/* Frame layout read from the seek table and step index, as SPEC.md has it. */
struct layout {
	size_t nframes;			/* data frames */
	uint64_t end[256];		/* end offset of data frame i */
	uint32_t seqs[256];
	uint32_t raw[256];
	uint64_t index_off, seek_off;
};

static void parse_layout(const uint8_t *b, size_t n, struct layout *lo)
{
	uint32_t nent = rlb_get_u32(b + n - 9), i;
	uint64_t pos = 0, toff = n - (8 + 8 * (uint64_t)nent + 9);
	const uint8_t *ix;

	ck_assert_uint_eq(rlb_get_u32(b + n - 4), RRT_SEEKABLE_MAGIC);
	ck_assert_uint_eq(b[n - 5], 0);
	ck_assert_uint_eq(rlb_get_u32(b + toff), RRT_SEEK_MAGIC);
	ck_assert_uint_le(nent - 2, 256);
	lo->nframes = nent - 2;
	for (i = 0; i < nent; i++) {
		uint32_t c = rlb_get_u32(b + toff + 8 + 8 * i);

		if (i >= 1 && i <= lo->nframes) {
			lo->raw[i - 1] = rlb_get_u32(b + toff + 12 + 8 * i);
			lo->end[i - 1] = pos + c;
			ck_assert_uint_eq(rlb_get_u32(b + pos), RRT_ZSTD_MAGIC);
		}
		if (i == nent - 1)
			lo->index_off = pos;
		pos += c;
	}
	ck_assert_uint_eq(pos, toff);
	lo->seek_off = toff;
	ix = b + lo->index_off;
	ck_assert_uint_eq(rlb_get_u32(ix), RRT_INDEX_MAGIC);
	ck_assert_uint_eq(rlb_get_u32(ix + 16), lo->nframes);
	for (i = 0; i < lo->nframes; i++)
		lo->seqs[i] = rlb_get_u32(ix + 8 + RRT_I_FIXED + 8 * i + 4);
}

/* 1 when offset i lies past the frame header of a data frame. */
static int in_data_block(const struct layout *lo, size_t i)
{
	size_t f;

	for (f = 0; f < lo->nframes; f++) {
		uint64_t start = f ? lo->end[f - 1] : 8 + RRT_H_SIZE;

		/* magic, descriptor, 1-byte content size, first block header */
		if (i >= start + 9 && i < lo->end[f] - 4)
			return 1;
	}
	return 0;
}

START_TEST(test_step_seqs_with_and_without_index)
{
	static const uint32_t lens[] = { 5, 90, 31, 260 };
	struct rlb_trace_header h;
	struct layout lo;
	struct tdata d;
	char path[512], cut[512];
	uint8_t *b;
	size_t n;

	make_header(&h, 32, 4, 2, 0);
	tdata_gen(&d, &h, 12, 3, lens, 4, 9);
	tpath(path, sizeof(path), "ss.rrt");
	tpath(cut, sizeof(cut), "ss-cut.rrt");
	write_trace(path, &d, 600, 0);
	check_step_seqs(path, &d, 0);
	b = slurp(path, &n);
	parse_layout(b, n, &lo);
	/* Without the seek table (the index is still found by the scan). */
	copy_prefix(path, cut, (size_t)lo.seek_off);
	check_step_seqs(cut, &d, 1);
	/* Without the index either: steps come from decoding frames. */
	copy_prefix(path, cut, (size_t)lo.index_off);
	check_step_seqs(cut, &d, 1);
	free(b);
	unlink(cut);
	unlink(path);
	tdata_free(&d);
}
END_TEST

/*
 * Without the index and the seek table, the steps come from the first
 * block of each frame; a frame whose checksum is wrong is reported when
 * its step is read, naming the frame, and the steps learned are right.
 */
START_TEST(test_steps_without_index_defer_checksum)
{
	static const uint32_t lens[] = { 5, 90, 31, 260 };
	struct rlb_trace_header h;
	struct rlb_trace_reader *r;
	struct rlb_seq_meta *m;
	struct rlb_err err = {0};
	struct layout lo;
	struct tdata d;
	const uint32_t *steps;
	char path[512], cut[512], off[64];
	size_t n, nsteps, i, failed = 0;
	uint8_t *b;

	make_header(&h, 32, 4, 2, 0);
	tdata_gen(&d, &h, 12, 3, lens, 4, 9);
	tpath(path, sizeof(path), "peek.rrt");
	tpath(cut, sizeof(cut), "peek-cut.rrt");
	write_trace(path, &d, 600, 0);
	b = slurp(path, &n);
	parse_layout(b, n, &lo);
	ck_assert_uint_ge(lo.nframes, 3);
	b[lo.end[1] - 1] ^= 0x5a;	/* frame 1's content checksum */
	spit(cut, b, (size_t)lo.index_off);
	ck_assert_msg(rlb_trace_reader_open(&r, cut, &err) == 0, "%s", err.msg);
	ck_assert_msg(rlb_trace_reader_steps(r, &steps, &nsteps, &err) == 0, "%s", err.msg);
	ck_assert_uint_eq(nsteps, 4);
	for (i = 0; i < nsteps; i++)
		ck_assert_uint_eq(steps[i], 3 + 2 * i);
	snprintf(off, sizeof(off), "offset %llu", (unsigned long long)lo.end[0]);
	for (i = 0; i < nsteps; i++) {
		int ret = rlb_trace_reader_step_seqs(r, steps[i], &m, &n, &err);

		if (ret == 0) {
			free(m);
			continue;
		}
		ck_assert_int_eq(ret, RLB_ECORRUPT);
		ck_assert_msg(strstr(err.msg, "checksum mismatch") && strstr(err.msg, off),
			      "%s", err.msg);
		failed++;
	}
	ck_assert_uint_eq(failed, 1);
	rlb_trace_reader_free(r);
	free(b);
	unlink(cut);
	unlink(path);
	tdata_free(&d);
}
END_TEST

/*
 * The step index's errors name the bad field, as the header's and the
 * plan's do (SPEC.md section 8): its content magic at the index frame's
 * offset + 8, a checksum mismatch at the CRC, its last 4 bytes.
 */
START_TEST(test_index_error_offsets)
{
	static const uint32_t lens[] = { 5, 90, 31 };
	struct rlb_trace_header h;
	struct rlb_trace_reader *r;
	struct rlb_err err = {0};
	struct layout lo;
	struct tdata d;
	char path[512], bad[512], want[128];
	size_t n;
	uint8_t *b;

	make_header(&h, 16, 2, 2, 0);
	tdata_gen(&d, &h, 6, 2, lens, 3, 5);
	tpath(path, sizeof(path), "ixoff.rrt");
	tpath(bad, sizeof(bad), "ixoff-bad.rrt");
	write_trace(path, &d, 0, 0);
	b = slurp(path, &n);
	parse_layout(b, n, &lo);

	b[lo.index_off + 8] ^= 0x01;		/* 'R' of RLBINDEX */
	spit(bad, b, n);
	b[lo.index_off + 8] ^= 0x01;
	ck_assert_int_eq(rlb_trace_reader_open(&r, bad, &err), RLB_ECORRUPT);
	snprintf(want, sizeof(want), "step index at offset %llu: bad magic",
		 (unsigned long long)(lo.index_off + 8));
	ck_assert_msg(strstr(err.msg, want) != NULL, "%s", err.msg);

	b[lo.seek_off - 6] ^= 0x01;		/* last sequence entry */
	spit(bad, b, n);
	ck_assert_int_eq(rlb_trace_reader_open(&r, bad, &err), RLB_ECORRUPT);
	snprintf(want, sizeof(want), "step index at offset %llu: checksum mismatch",
		 (unsigned long long)(lo.seek_off - 4));
	ck_assert_msg(strstr(err.msg, want) != NULL, "%s", err.msg);

	free(b);
	unlink(bad);
	unlink(path);
	tdata_free(&d);
}
END_TEST

START_TEST(test_empty_trace)
{
	struct rlb_trace_header h;
	struct rlb_trace_writer *w;
	struct rlb_trace_reader *r;
	struct rlb_trace_info info;
	struct rlb_err err = {0};
	struct rlb_seq s;
	struct rlb_seq_meta *m;
	const uint32_t *steps;
	size_t nsteps, n;
	char path[512];

	make_header(&h, 8, 2, 2, 0);
	tpath(path, sizeof(path), "empty.rrt");
	ck_assert_int_eq(rlb_trace_writer_open(&w, path, &h, NULL, &err), 0);
	ck_assert_int_eq(rlb_trace_writer_close(w, &err), 0);
	ck_assert_int_eq(rlb_trace_reader_open(&r, path, &err), 0);
	ck_assert_int_eq(rlb_trace_reader_truncated(r), 0);
	ck_assert_int_eq(rlb_trace_reader_steps(r, &steps, &nsteps, &err), 0);
	ck_assert_uint_eq(nsteps, 0);
	ck_assert_int_eq(rlb_trace_reader_next(r, &s, &err), 0);
	ck_assert_int_eq(rlb_trace_reader_seek_step(r, 0, &err), RLB_ENOTFOUND);
	ck_assert_int_eq(rlb_trace_reader_step_seqs(r, 0, &m, &n, &err), RLB_ENOTFOUND);
	rlb_trace_reader_free(r);
	ck_assert_int_eq(rlb_trace_verify(path, &info, &err), 0);
	ck_assert_uint_eq(info.frames, 0);
	ck_assert_uint_eq(info.sequences, 0);
	ck_assert_int_eq(info.has_seek_table, 1);
	/* header 164 + index 8+28 + seek table 8+16+9 */
	ck_assert_uint_eq(info.file_bytes, 164 + 36 + 33);
	unlink(path);
	/* Closing NULL and aborting NULL are no-ops. */
	ck_assert_int_eq(rlb_trace_writer_close(NULL, &err), 0);
	rlb_trace_writer_abort(NULL);
	rlb_trace_reader_free(NULL);
}
END_TEST

/* Bytes after a complete trace: corrupt, at the offset where they start. */
START_TEST(test_data_after_seek_table)
{
	struct rlb_trace_header h;
	struct rlb_trace_writer *w;
	struct rlb_trace_info info;
	struct rlb_err err = {0};
	char path[512];
	FILE *fp;

	make_header(&h, 8, 2, 2, 0);
	tpath(path, sizeof(path), "junk.rrt");
	ck_assert_int_eq(rlb_trace_writer_open(&w, path, &h, NULL, &err), 0);
	ck_assert_int_eq(rlb_trace_writer_close(w, &err), 0);
	fp = fopen(path, "ab");
	ck_assert_ptr_nonnull(fp);
	fputs("JUNKJUNK", fp);
	ck_assert_int_eq(fclose(fp), 0);
	/* header 164, index 36, seek table 33 from offset 200 */
	ck_assert_int_eq(rlb_trace_verify(path, &info, &err), RLB_ECORRUPT);
	ck_assert_msg(strstr(err.msg, "seek table at offset 200: 8 bytes of data after it, from offset 233"),
		      "%s", err.msg);
	/* info and err may be NULL */
	ck_assert_int_eq(rlb_trace_verify(path, NULL, NULL), RLB_ECORRUPT);
	unlink(path);
}
END_TEST

/* Open a writer for the append tests (16 experts, top-2, 2 layers). */
static struct rlb_trace_writer *open_small(const char *path, uint32_t flags)
{
	struct rlb_trace_header h;
	struct rlb_trace_writer *w;
	struct rlb_err err = {0};

	make_header(&h, 16, 2, 2, flags);
	ck_assert_int_eq(rlb_trace_writer_open(&w, path, &h, NULL, &err), 0);
	return w;
}

/* Append one sequence expecting failure with exactly msg; checks stickiness. */
static void expect_append_error(uint32_t flags, const struct rlb_seq *pre,
				const struct rlb_seq *bad, int code, const char *msg)
{
	static uint16_t ok_ids[2 * 4 * 2] = { 0 };
	struct rlb_seq good = { .step = 100, .group = 0, .sample = 0, .tokens = 4,
				.ids = ok_ids };
	static float gates[2 * 4 * 2];
	struct rlb_trace_writer *w;
	struct rlb_err err = {0};
	char path[512], tmp[600];

	tpath(path, sizeof(path), "bad.rrt");
	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	w = open_small(path, flags);
	if (flags & RLB_TRACE_F_GATES)
		good.gates = gates;
	if (pre)
		ck_assert_int_eq(rlb_trace_writer_append(w, pre), 0);
	ck_assert_int_eq(rlb_trace_writer_error(w, &err), 0);
	ck_assert_int_eq(rlb_trace_writer_append(w, bad), code);
	ck_assert_int_eq(rlb_trace_writer_error(w, &err), code);
	ck_assert_str_eq(err.msg, msg);
	/* Sticky: a valid sequence now fails the same way. */
	ck_assert_int_eq(rlb_trace_writer_append(w, &good), code);
	rlb_err_clear(&err);
	ck_assert_int_eq(rlb_trace_writer_error(w, &err), code);
	ck_assert_str_eq(err.msg, msg);
	rlb_err_clear(&err);
	ck_assert_int_eq(rlb_trace_writer_close(w, &err), code);
	ck_assert_str_eq(err.msg, msg);
	ck_assert_int_ne(access(path, F_OK), 0);
	ck_assert_int_ne(access(tmp, F_OK), 0);
}

START_TEST(test_append_validation)
{
	uint16_t ids[2 * 4 * 2], big[2 * 3 * 2];
	float gates[2 * 4 * 2];
	struct rlb_seq q = { .step = 2, .group = 1, .sample = 5, .tokens = 4, .ids = ids };
	struct rlb_seq pre = q, b = q;

	memset(ids, 0, sizeof(ids));
	memset(big, 0, sizeof(big));
	/* layer 1, token 2, column 0 of a 3-token sequence */
	big[(1 * 3 + 2) * 2 + 0] = 16;
	b.ids = big;
	b.tokens = 3;
	expect_append_error(0, NULL, &b, RLB_ERANGE,
			    "sequence (step 2, group 1, sample 5): expert id 16 at layer 1, token 2, column 0 is out of range (experts 16)");
	b = q;
	b.tokens = 0;
	expect_append_error(0, NULL, &b, RLB_EINVAL,
			    "sequence (step 2, group 1, sample 5): no tokens");
	b.tokens = RLB_TRACE_MAX_SEQ_TOKENS + 1;
	expect_append_error(0, NULL, &b, RLB_ERANGE,
			    "sequence (step 2, group 1, sample 5): 16777217 tokens exceeds the limit 16777216");
	pre.step = 7;
	b = q;
	expect_append_error(0, &pre, &b, RLB_EINVAL,
			    "sequence (step 2, group 1, sample 5): step 2 after step 7 (steps must not decrease)");
	b = q;
	b.gates = gates;
	expect_append_error(0, NULL, &b, RLB_EINVAL,
			    "sequence (step 2, group 1, sample 5): gates given but the trace has none");
	b = q;
	expect_append_error(RLB_TRACE_F_GATES, NULL, &b, RLB_EINVAL,
			    "sequence (step 2, group 1, sample 5): gates missing (the trace has gates)");
	b.ids = NULL;
	expect_append_error(0, NULL, &b, RLB_EINVAL,
			    "sequence (step 2, group 1, sample 5): no ids");
	expect_append_error(0, NULL, NULL, RLB_EINVAL, "no sequence");
	/* Gate weights must be finite and >= 0: layer 1, token 3, column 1. */
	memset(gates, 0, sizeof(gates));
	b = q;
	b.gates = gates;
	gates[(1 * 4 + 3) * 2 + 1] = INFINITY;
	expect_append_error(RLB_TRACE_F_GATES, NULL, &b, RLB_EINVAL,
			    "sequence (step 2, group 1, sample 5): gate inf at layer 1, token 3, column 1 is negative or not finite");
	gates[(1 * 4 + 3) * 2 + 1] = -INFINITY;
	expect_append_error(RLB_TRACE_F_GATES, NULL, &b, RLB_EINVAL,
			    "sequence (step 2, group 1, sample 5): gate -inf at layer 1, token 3, column 1 is negative or not finite");
	gates[(1 * 4 + 3) * 2 + 1] = 0.0f;
	gates[(0 * 4 + 2) * 2 + 0] = NAN;
	expect_append_error(RLB_TRACE_F_GATES, NULL, &b, RLB_EINVAL,
			    "sequence (step 2, group 1, sample 5): gate nan at layer 0, token 2, column 0 is negative or not finite");
	gates[(0 * 4 + 2) * 2 + 0] = -3.0f;
	expect_append_error(RLB_TRACE_F_GATES, NULL, &b, RLB_EINVAL,
			    "sequence (step 2, group 1, sample 5): gate -3 at layer 0, token 2, column 0 is negative or not finite");
	/* The ids are checked first. */
	b.ids = big;
	b.tokens = 3;
	expect_append_error(RLB_TRACE_F_GATES, NULL, &b, RLB_ERANGE,
			    "sequence (step 2, group 1, sample 5): expert id 16 at layer 1, token 2, column 0 is out of range (experts 16)");
}
END_TEST

/* The extremes of valid gate weights (0, -0, the largest float) round-trip. */
START_TEST(test_append_gate_extremes)
{
	uint16_t ids[2 * 4 * 2];
	float gates[2 * 4 * 2] = { 0.0f, -0.0f, FLT_MAX, FLT_MIN, 1e-45f, 1.0f };
	struct rlb_seq q = { .step = 2, .group = 1, .sample = 5, .tokens = 4, .ids = ids,
			     .gates = gates };
	struct rlb_trace_reader *r;
	struct rlb_trace_writer *w;
	struct rlb_seq seq;
	struct rlb_err err = {0};
	char path[512];

	memset(ids, 0, sizeof(ids));
	tpath(path, sizeof(path), "gates.rrt");
	w = open_small(path, RLB_TRACE_F_GATES);
	ck_assert_int_eq(rlb_trace_writer_append(w, &q), 0);
	ck_assert_msg(rlb_trace_writer_close(w, &err) == 0, "%s", err.msg);
	ck_assert_msg(rlb_trace_reader_open(&r, path, &err) == 0, "%s", err.msg);
	ck_assert_msg(rlb_trace_reader_next(r, &seq, &err) == 1, "%s", err.msg);
	ck_assert(memcmp(seq.gates, gates, sizeof(gates)) == 0);
	rlb_trace_reader_free(r);
	unlink(path);
}
END_TEST

START_TEST(test_append_too_large)
{
	/* 2^20 tokens x 64 layers x top-64 cannot fit a 1 GiB frame. */
	uint16_t ids[1] = { 0 };
	struct rlb_seq q = { .step = 1, .tokens = 1u << 20, .ids = ids };
	struct rlb_trace_header h;
	struct rlb_trace_writer *w;
	struct rlb_err err = {0};
	char path[512];

	tpath(path, sizeof(path), "large.rrt");
	make_header(&h, 128, 64, 64, 0);
	ck_assert_int_eq(rlb_trace_writer_open(&w, path, &h, NULL, &err), 0);
	ck_assert_int_eq(rlb_trace_writer_append(w, &q), RLB_ERANGE);
	ck_assert_int_eq(rlb_trace_writer_error(w, &err), RLB_ERANGE);
	ck_assert_str_eq(err.msg, "sequence (step 1, group 0, sample 0): 4312268816 bytes coded exceeds the frame limit 1073741824");
	rlb_trace_writer_abort(w);
}
END_TEST

START_TEST(test_writer_open_errors)
{
	struct rlb_trace_header h;
	struct rlb_trace_writer *w = (struct rlb_trace_writer *)&h;
	struct rlb_trace_writer_opts o = { .level = 3 };
	struct rlb_err err = {0};
	char path[512];

	tpath(path, sizeof(path), "never.rrt");
	make_header(&h, 0, 2, 2, 0);
	ck_assert_int_eq(rlb_trace_writer_open(&w, path, &h, NULL, &err), RLB_ERANGE);
	ck_assert_ptr_null(w);
	ck_assert_str_eq(err.msg, "trace header: experts 0 is out of range [1, 65535]");
	make_header(&h, 4, 5, 2, 0);
	ck_assert_int_eq(rlb_trace_writer_open(&w, path, &h, NULL, &err), RLB_ERANGE);
	ck_assert_str_eq(err.msg, "trace header: topk 5 exceeds experts 4");
	make_header(&h, 4, 2, 0, 0);
	ck_assert_int_eq(rlb_trace_writer_open(&w, path, &h, NULL, &err), RLB_ERANGE);
	ck_assert_str_eq(err.msg, "trace header: moe_layers 0 is out of range [1, 1024]");
	make_header(&h, 4, 65, 2, 0);
	ck_assert_int_eq(rlb_trace_writer_open(&w, path, &h, NULL, &err), RLB_ERANGE);
	ck_assert_str_eq(err.msg, "trace header: topk 65 is out of range [1, 64]");
	make_header(&h, 4, 2, 2, 1u << 5);
	ck_assert_int_eq(rlb_trace_writer_open(&w, path, &h, NULL, &err), RLB_EUNSUPPORTED);
	ck_assert_str_eq(err.msg, "trace header: unknown flags 0x00000020");
	make_header(&h, 4, 2, 2, 0);
	memset(h.model, 'x', sizeof(h.model));
	ck_assert_int_eq(rlb_trace_writer_open(&w, path, &h, NULL, &err), RLB_EINVAL);
	ck_assert_str_eq(err.msg, "trace header: model name is not NUL-terminated");
	make_header(&h, 4, 2, 2, 0);
	memcpy(h.model, "gpt\xc0\xae", 6);
	ck_assert_int_eq(rlb_trace_writer_open(&w, path, &h, NULL, &err), RLB_EINVAL);
	ck_assert_str_eq(err.msg, "trace header: model name is not UTF-8");
	make_header(&h, 300, 2, 2, 0);
	o.coding = RLB_TRACE_CODING_RANK;
	ck_assert_int_eq(rlb_trace_writer_open(&w, path, &h, &o, &err), RLB_EINVAL);
	ck_assert_str_eq(err.msg, "rank coding needs at most 256 experts");
	o.coding = RLB_TRACE_CODING_DELTA;
	ck_assert_int_eq(rlb_trace_writer_open(&w, path, &h, &o, &err), RLB_EINVAL);
	ck_assert_str_eq(err.msg, "delta coding needs the sorted flag");
	o.coding = 0;
	o.level = 99;
	ck_assert_int_eq(rlb_trace_writer_open(&w, path, &h, &o, &err), RLB_ERANGE);
	o.level = 3;
	ck_assert_int_eq(rlb_trace_writer_open(&w, "/nonexistent-dir/x.rrt", &h, &o, &err),
			 RLB_EIO);
	ck_assert_str_eq(err.msg,
			 "cannot create '/nonexistent-dir/x.rrt.tmp': No such file or directory");
	ck_assert_int_eq(rlb_trace_writer_open(&w, "", &h, &o, &err), RLB_EINVAL);
	ck_assert_str_eq(err.msg, "an empty output path");
	ck_assert_int_ne(access(".tmp", F_OK), 0);
	ck_assert_int_ne(access(path, F_OK), 0);
}
END_TEST

START_TEST(test_abort_removes_output)
{
	struct rlb_trace_writer *w;
	char path[512], tmp[600];
	uint16_t ids[2 * 2 * 1] = { 1, 2, 3, 4 };
	struct rlb_seq q = { .tokens = 1, .ids = ids };

	tpath(path, sizeof(path), "abort.rrt");
	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	w = open_small(path, 0);
	ck_assert_int_eq(access(tmp, F_OK), 0);	/* header written through */
	ck_assert_int_eq(rlb_trace_writer_append(w, &q), 0);
	rlb_trace_writer_abort(w);
	ck_assert_int_ne(access(tmp, F_OK), 0);
	ck_assert_int_ne(access(path, F_OK), 0);
}
END_TEST

START_TEST(test_reader_open_errors)
{
	struct rlb_trace_reader *r = (struct rlb_trace_reader *)1;
	struct rlb_err err = {0};
	char path[512], msg[1200];

	ck_assert_int_eq(rlb_trace_reader_open(&r, "/nonexistent-dir/x.rrt", &err), RLB_EIO);
	ck_assert_ptr_null(r);
	ck_assert_str_eq(err.msg,
			 "cannot open trace '/nonexistent-dir/x.rrt': No such file or directory");
	tpath(path, sizeof(path), "junk.rrt");
	spit(path, (const uint8_t *)"\x28\xb5\x2f\xfd" "0123456789abcdef", 20);
	ck_assert_int_eq(rlb_trace_reader_open(&r, path, &err), RLB_ECORRUPT);
	snprintf(msg, sizeof(msg),
		 "trace '%s': header at offset 0: the file is zstd-compressed, not a relibra trace: "
		 "decompress it first", path);
	ck_assert_str_eq(err.msg, msg);
	spit(path, (const uint8_t *)"\x01\x02\x03\x04" "0123456789abcdef", 20);
	ck_assert_int_eq(rlb_trace_reader_open(&r, path, &err), RLB_ECORRUPT);
	snprintf(msg, sizeof(msg),
		 "trace '%s': header at offset 0: not a relibra trace (magic 0x04030201)", path);
	ck_assert_str_eq(err.msg, msg);
	spit(path, (const uint8_t *)"abc", 3);
	ck_assert_int_eq(rlb_trace_reader_open(&r, path, &err), RLB_ETRUNC);
	snprintf(msg, sizeof(msg),
		 "trace '%s': header at offset 0: file is 3 bytes, too short for a trace", path);
	ck_assert_str_eq(err.msg, msg);
	unlink(path);
}
END_TEST

/*
 * Rewrite a file's header content (keeping the frame sizes consistent):
 * EXTRA bytes of unknown fields inserted before the CRC.
 */
static void rewrite_header(const char *src, const char *dst, uint16_t major,
			   uint16_t minor, uint32_t flags, size_t extra)
{
	size_t n, hs, end, m;
	uint8_t *b = slurp(src, &n), *o = calloc(1, n + extra), *c;
	uint32_t nent;

	hs = 8 + rlb_get_u32(b + 4);
	end = hs - 8 - 4;
	memcpy(o, b, end + 8);
	c = o + 8;
	rlb_put_u16(c + RRT_H_MAJOR, major);
	rlb_put_u16(c + RRT_H_MINOR, minor);
	rlb_put_u32(c + RRT_H_FLAGS, flags);
	memset(c + end, 0xA5, extra);	/* unknown newer fields ... */
	if (minor >= 2 && end == RRT_H_END_1_1 && extra >= 4)
		memset(c + end, 0, 4);	/* ... after 1.2's: no layer pattern */
	rlb_put_u32(o + 4, (uint32_t)(hs - 8 + extra));
	rlb_put_u32(c + end + extra, rlb_rrt_crc32c(c, end + extra));
	memcpy(o + hs + extra, b + hs, n - hs);
	m = n + extra;
	/* Seek table entry 0 covers the header frame. */
	nent = rlb_get_u32(o + m - 9);
	rlb_put_u32(o + m - 9 - 8 * (size_t)nent, (uint32_t)(hs + extra));
	spit(dst, o, m);
	free(b);
	free(o);
}

/* Copy SRC to DST with N bytes at header field offset OFF replaced, the header CRC kept right. */
static void patch_header(const char *src, const char *dst, size_t off,
			 const uint8_t *bytes, size_t n)
{
	size_t len;
	uint8_t *b = slurp(src, &len);
	size_t end = rlb_get_u32(b + 4) - 4;

	memcpy(b + 8 + off, bytes, n);
	rlb_put_u32(b + 8 + end, rlb_rrt_crc32c(b + 8, end));
	spit(dst, b, len);
	free(b);
}

/*
 * A layer pattern (1.2): written only with one, read back letter for
 * letter, part of the identity a config and a plan are checked against,
 * and its damage reported at its offset.
 */
START_TEST(test_layer_pattern_header)
{
	static const uint32_t lens[] = { 9, 140 };
	struct rlb_trace_header h, plain;
	struct rlb_trace_reader *r;
	struct rlb_config cfg;
	struct rlb_err err = {0};
	struct tdata d;
	char path[512], alt[512];
	uint8_t *b;
	size_t n;

	make_header(&h, 16, 2, 4, 0);
	h.first_dense_layers = 0;
	h.moe_layer_period = 1;
	plain = h;
	strcpy(h.layer_pattern, "MEM*E-E*E");
	tdata_gen(&d, &h, 4, 2, lens, 2, 5);
	tpath(path, sizeof(path), "pattern.rrt");
	tpath(alt, sizeof(alt), "pattern-alt.rrt");
	write_trace(path, &d, 0, 0);
	read_compare(path, &d);
	b = slurp(path, &n);
	ck_assert_uint_eq(rlb_get_u32(b + 4), RRT_H_SIZE_1_2 + 12);	/* 9 letters, 3 of padding */
	ck_assert_uint_eq(rlb_get_u16(b + 8 + RRT_H_PATTERN_LEN), 9);
	ck_assert_mem_eq(b + 8 + RRT_H_PATTERN, "MEM*E-E*E\0\0\0", 12);
	free(b);
	ck_assert(rlb_plan_trace_hash(&h) != rlb_plan_trace_hash(&plain));

	/* the config must carry the same pattern */
	memset(&cfg, 0, sizeof(cfg));
	strcpy(cfg.model.name, "test-model");
	cfg.model.experts = 16;
	cfg.model.topk = 2;
	cfg.model.moe_layers = 4;
	ck_assert_int_eq(rlb_trace_header_check(&h, &cfg, &err), RLB_EMISMATCH);
	ck_assert_str_eq(err.msg, "the config does not match the trace: 'model.layer_pattern' "
			 "is \"\" in the config, \"MEM*E-E*E\" in the trace");
	strcpy(cfg.model.layer_pattern, "MEM*E-E*E");
	ck_assert_int_eq(rlb_trace_header_check(&h, &cfg, &err), 0);
	/* long patterns: the first layer where they part, not both in full */
	{
		struct rlb_trace_header lh = h;
		struct rlb_config lc = cfg;
		int i;

		for (i = 0; i < 100; i++)
			lh.layer_pattern[i] = lc.model.layer_pattern[i] = i % 2 ? 'E' : 'M';
		lh.layer_pattern[100] = lc.model.layer_pattern[100] = '\0';
		lc.model.layer_pattern[41] = '*';
		ck_assert_int_eq(rlb_trace_header_check(&lh, &lc, &err), RLB_EMISMATCH);
		ck_assert_str_eq(err.msg, "the config does not match the trace: 'model.layer_pattern' "
				 "differs at layer 41 ('*' in the config, 'E' in the trace; 100 and "
				 "100 layers)");
		lc.model.layer_pattern[41] = 'E';
		lc.model.layer_pattern[99] = '\0';
		ck_assert_int_eq(rlb_trace_header_check(&lh, &lc, &err), RLB_EMISMATCH);
		ck_assert_str_eq(err.msg, "the config does not match the trace: 'model.layer_pattern' "
				 "differs at layer 99 (no layer in the config, 'E' in the trace; 99 and "
				 "100 layers)");
	}
	rlb_trace_header_from_config(&plain, &cfg);
	ck_assert_str_eq(plain.layer_pattern, "MEM*E-E*E");

	/* damage: a letter, the count of 'E', the padding, the length, the reserved field */
	patch_header(path, alt, RRT_H_PATTERN + 3, (const uint8_t *)"x", 1);
	ck_assert_int_eq(rlb_trace_reader_open(&r, alt, &err), RLB_ECORRUPT);
	ck_assert_msg(strstr(err.msg, "header at offset 8: layer pattern has byte 0x78 at layer 3 "
			     "(expected E, M, * or -)"), "%s", err.msg);
	patch_header(path, alt, RRT_H_PATTERN + 4, (const uint8_t *)"M", 1);
	ck_assert_int_eq(rlb_trace_reader_open(&r, alt, &err), RLB_ECORRUPT);
	ck_assert_msg(strstr(err.msg, "layer pattern has 3 MoE layers ('E'), moe_layers is 4"),
		      "%s", err.msg);
	patch_header(path, alt, RRT_H_PATTERN + 10, (const uint8_t *)"E", 1);
	ck_assert_int_eq(rlb_trace_reader_open(&r, alt, &err), RLB_ECORRUPT);
	ck_assert_msg(strstr(err.msg, "header at offset 168: layer pattern is not letters followed "
			     "by zero padding"), "%s", err.msg);
	patch_header(path, alt, RRT_H_PATTERN_LEN, (const uint8_t *)"\x0d\0", 2);
	ck_assert_int_eq(rlb_trace_reader_open(&r, alt, &err), RLB_ECORRUPT);
	ck_assert_msg(strstr(err.msg, "content size 176, expected 180 for version 1.2"), "%s", err.msg);
	patch_header(path, alt, RRT_H_PATTERN_LEN + 2, (const uint8_t *)"\1", 1);
	ck_assert_int_eq(rlb_trace_reader_open(&r, alt, &err), RLB_ECORRUPT);
	ck_assert_msg(strstr(err.msg, "header at offset 164: layer pattern length above 1024 or "
			     "reserved field not 0"), "%s", err.msg);
	/* the writer refuses a pattern that is not one */
	strcpy(h.layer_pattern, "MEM*E-E*");
	{
		struct rlb_trace_writer *w = NULL;

		ck_assert_int_eq(rlb_trace_writer_open(&w, alt, &h, NULL, &err), RLB_EINVAL);
		ck_assert_ptr_null(w);
	}
	ck_assert_msg(strstr(err.msg, "layer pattern has 3 MoE layers ('E'), moe_layers is 4"),
		      "%s", err.msg);
	unlink(path);
	unlink(alt);
	tdata_free(&d);
}
END_TEST

START_TEST(test_versions_and_flags)
{
	static const uint32_t lens[] = { 9, 140 };
	struct rlb_trace_header h;
	struct rlb_trace_reader *r;
	struct rlb_err err = {0};
	struct tdata d;
	char path[512], alt[512], msg[1200];

	make_header(&h, 16, 2, 4, 0);
	tdata_gen(&d, &h, 4, 2, lens, 2, 3);
	tpath(path, sizeof(path), "ver.rrt");
	tpath(alt, sizeof(alt), "ver-alt.rrt");
	write_trace(path, &d, 0, 0);
	/* A newer minor with 8 bytes of unknown fields after 1.1's reads fine. */
	d.h.moe_layer_period = 2;
	d.h.moe_layer_offset = 1;
	tpath(msg, sizeof(msg), "ver-1.1.rrt");
	write_trace(msg, &d, 0, 0);
	read_compare(msg, &d);
	rewrite_header(msg, alt, 1, 3, 0, 8);
	read_compare_minor(alt, &d, 3);
	ck_assert_int_eq(rlb_trace_reader_open(&r, alt, &err), 0);
	ck_assert_uint_eq(rlb_trace_reader_header(r)->moe_layer_period, 2);
	ck_assert_uint_eq(rlb_trace_reader_header(r)->moe_layer_offset, 1);
	rlb_trace_reader_free(r);
	/* 1.1 has exactly 160 bytes, and a period of 1 to 64 above its offset */
	rewrite_header(msg, alt, 1, 1, 0, 4);
	ck_assert_int_eq(rlb_trace_reader_open(&r, alt, &err), RLB_ECORRUPT);
	ck_assert_msg(strstr(err.msg, "header at offset 4: content size 164, expected 160 for version 1.1"),
		      "%s", err.msg);
	rewrite_header(path, alt, 1, 1, 0, 0);
	ck_assert_int_eq(rlb_trace_reader_open(&r, alt, &err), RLB_ECORRUPT);
	ck_assert_msg(strstr(err.msg, "content size 156, expected 160 for version 1.1"), "%s", err.msg);
	patch_header(msg, alt, RRT_H_PERIOD, (const uint8_t *)"\0\0", 2);
	ck_assert_int_eq(rlb_trace_reader_open(&r, alt, &err), RLB_ECORRUPT);
	ck_assert_msg(strstr(err.msg, "header at offset 160: moe_layer_period is 0"), "%s", err.msg);
	patch_header(msg, alt, RRT_H_PERIOD, (const uint8_t *)"\x41\0", 2);
	ck_assert_int_eq(rlb_trace_reader_open(&r, alt, &err), RLB_ECORRUPT);
	ck_assert_msg(strstr(err.msg, "moe_layer_period 65 is out of range [1, 64]"), "%s", err.msg);
	patch_header(msg, alt, RRT_H_OFFSET, (const uint8_t *)"\2\0", 2);
	ck_assert_int_eq(rlb_trace_reader_open(&r, alt, &err), RLB_ECORRUPT);
	ck_assert_msg(strstr(err.msg, "moe_layer_offset 2 is not below moe_layer_period 2"), "%s", err.msg);
	unlink(msg);
	d.h.moe_layer_period = 1;
	d.h.moe_layer_offset = 0;
	/* Optional flag bits (16-31) are ignored. */
	rewrite_header(path, alt, 1, 0, 1u << 20, 0);
	read_compare(alt, &d);
	/* A newer major is refused. */
	rewrite_header(path, alt, 2, 0, 0, 0);
	ck_assert_int_eq(rlb_trace_reader_open(&r, alt, &err), RLB_EVERSION);
	snprintf(msg, sizeof(msg),
		 "trace '%s': header at offset 16: unsupported trace version 2.0 (this reader supports 1.x)",
		 alt);
	ck_assert_str_eq(err.msg, msg);
	/* Unknown required flags are refused. */
	rewrite_header(path, alt, 1, 0, 1u << 7, 0);
	ck_assert_int_eq(rlb_trace_reader_open(&r, alt, &err), RLB_EUNSUPPORTED);
	ck_assert_msg(strstr(err.msg, "unknown flags 0x00000080") != NULL, "%s", err.msg);
	/* A model name that is not UTF-8 (with a correct header CRC). */
	patch_header(path, alt, RRT_H_MODEL, (const uint8_t *)"\xff", 1);
	ck_assert_int_eq(rlb_trace_reader_open(&r, alt, &err), RLB_ECORRUPT);
	snprintf(msg, sizeof(msg), "trace '%s': header at offset %d: model name is not UTF-8",
		 alt, 8 + RRT_H_MODEL);
	ck_assert_str_eq(err.msg, msg);
	/* The same for the source, named at its field. */
	patch_header(path, alt, RRT_H_SOURCE, (const uint8_t *)"\xc3\x28", 2);
	ck_assert_int_eq(rlb_trace_reader_open(&r, alt, &err), RLB_ECORRUPT);
	snprintf(msg, sizeof(msg), "trace '%s': header at offset %d: source is not UTF-8",
		 alt, 8 + RRT_H_SOURCE);
	ck_assert_str_eq(err.msg, msg);
	/* Extra bytes are not allowed for the current minor. */
	rewrite_header(path, alt, 1, 0, 0, 4);
	ck_assert_int_eq(rlb_trace_reader_open(&r, alt, &err), RLB_ECORRUPT);
	ck_assert_msg(strstr(err.msg, "header at offset 4: content size 160, expected 156") != NULL,
		      "%s", err.msg);
	unlink(alt);
	unlink(path);
	tdata_free(&d);
}
END_TEST

/*
 * Read a damaged trace, reading ahead on THREADS threads.  Every sequence
 * returned must equal the original at its position; returns the
 * sequences read, *failed on an error (whose message must name an
 * offset; it lands in *e, and the reader repeats it), and the reader's
 * truncation flag.
 */
static size_t read_damaged_on(const char *path, const struct tdata *d,
			      unsigned threads, int *failed, int *truncated,
			      int *open_failed, struct rlb_err *e)
{
	struct rlb_trace_reader *r;
	struct rlb_err again = {0};
	struct rlb_seq s;
	size_t i = 0;
	int rc;

	*failed = *truncated = *open_failed = 0;
	rlb_err_clear(e);
	rc = rlb_trace_reader_open(&r, path, e);
	if (rc != 0) {
		ck_assert_msg(strstr(e->msg, "offset") != NULL, "no offset in '%s'", e->msg);
		*failed = *open_failed = 1;
		return 0;
	}
	ck_assert_int_eq(rlb_trace_reader_set_threads(r, threads, e), 0);
	*truncated = rlb_trace_reader_truncated(r);
	while ((rc = rlb_trace_reader_next(r, &s, e)) == 1) {
		ck_assert_uint_lt(i, d->n);
		ck_assert_msg(seq_equal(d, i, &s), "sequence %zu read back wrong", i);
		i++;
	}
	if (rc < 0) {
		ck_assert_msg(strstr(e->msg, "offset") != NULL, "no offset in '%s'", e->msg);
		*failed = 1;
		/* the error is sticky */
		ck_assert_int_eq(rlb_trace_reader_next(r, &s, &again), rc);
		ck_assert_str_eq(again.msg, e->msg);
	}
	rlb_trace_reader_free(r);
	return i;
}

/*
 * The same without read-ahead and on 2 threads, which must agree in
 * everything: sequences, where the error comes, its code and message.
 */
static size_t read_damaged(const char *path, const struct tdata *d, int *failed,
			   int *truncated, int *open_failed)
{
	struct rlb_err e1, e2;
	int f2, t2, o2;
	size_t n1, n2;

	n1 = read_damaged_on(path, d, 1, failed, truncated, open_failed, &e1);
	n2 = read_damaged_on(path, d, 2, &f2, &t2, &o2, &e2);
	ck_assert_uint_eq(n2, n1);
	ck_assert_int_eq(f2, *failed);
	ck_assert_int_eq(t2, *truncated);
	ck_assert_int_eq(o2, *open_failed);
	ck_assert_int_eq(e2.code, e1.code);
	ck_assert_str_eq(e2.msg, e1.msg);
	return n1;
}

/* rlb_trace_verify, checked against a run that reads ahead on 3 threads. */
static int verify_both(const char *path, struct rlb_trace_info *info,
		       struct rlb_err *err)
{
	struct rlb_trace_info t;
	struct rlb_err e = {0};
	int rc = rlb_trace_verify(path, info, err);

	ck_assert_int_eq(rlb_trace_verify_threads(path, 3, &t, &e), rc);
	if (rc != 0)
		ck_assert_str_eq(e.msg, err->msg);
	ck_assert_uint_eq(t.file_bytes, info->file_bytes);
	ck_assert_uint_eq(t.raw_id_bytes, info->raw_id_bytes);
	ck_assert_uint_eq(t.raw_bytes, info->raw_bytes);
	ck_assert_uint_eq(t.frames, info->frames);
	ck_assert_uint_eq(t.steps, info->steps);
	ck_assert_uint_eq(t.sequences, info->sequences);
	ck_assert_uint_eq(t.tokens, info->tokens);
	ck_assert_int_eq(t.has_seek_table, info->has_seek_table);
	ck_assert_int_eq(t.has_step_index, info->has_step_index);
	ck_assert_int_eq(t.truncated, info->truncated);
	ck_assert_uint_eq(t.valid_bytes, info->valid_bytes);
	ck_assert_uint_eq(t.first_step, info->first_step);
	ck_assert_uint_eq(t.last_step, info->last_step);
	return rc;
}

/*
 * The small multi-frame traces of the corruption loops (< 2 KB each):
 * kind 0 has rank-coded u8 ids, kind 1 sorted delta-coded u16 ids with
 * gates.
 */
static void small_trace(struct tdata *d, char *path, size_t n, int kind)
{
	static const uint32_t lens[] = { 3, 12, 6, 9 };
	struct rlb_trace_header h;

	if (kind == 0)
		make_header(&h, 16, 2, 2, 0);
	else
		make_header(&h, 1000, 2, 1, RLB_TRACE_F_SORTED | RLB_TRACE_F_GATES);
	tdata_gen(d, &h, kind == 0 ? 9 : 6, 3, lens, 4, 11);
	tpath(path, n, "small.rrt");
	write_trace(path, d, kind == 0 ? 96 : 160, 0);
}

START_TEST(test_truncate_every_offset)
{
	struct tdata d;
	struct layout lo;
	char path[512], cut[512];
	uint8_t *b;
	size_t n, len, f, expect;

	small_trace(&d, path, sizeof(path), _i);
	tpath(cut, sizeof(cut), "cut.rrt");
	b = slurp(path, &n);
	ck_assert_uint_lt(n, 2048);
	parse_layout(b, n, &lo);
	ck_assert_uint_ge(lo.nframes, 4);
	for (len = 0; len < n; len++) {
		int failed, truncated, open_failed;
		size_t got;
		struct rlb_trace_info info;
		struct rlb_err err = {0};

		spit(cut, b, len);
		got = read_damaged(cut, &d, &failed, &truncated, &open_failed);
		if (len < 8 + RRT_H_SIZE) {
			ck_assert_msg(open_failed, "cut at %zu: header accepted", len);
			continue;
		}
		/* Past the header a cut is truncation, never corruption. */
		ck_assert_msg(!failed, "cut at %zu reported an error", len);
		ck_assert_msg(truncated, "cut at %zu not reported as truncated", len);
		for (f = 0, expect = 0; f < lo.nframes && lo.end[f] <= len; f++)
			expect += lo.seqs[f];
		ck_assert_msg(got == expect, "cut at %zu: %zu sequences, expected %zu",
			      len, got, expect);
		ck_assert_int_eq(verify_both(cut, &info, &err), 0);
		ck_assert_int_eq(info.truncated, 1);
		ck_assert_uint_eq(info.sequences, expect);
		ck_assert_uint_le(info.valid_bytes, len);
		ck_assert_uint_eq(info.frames, f);
	}
	free(b);
	unlink(cut);
	unlink(path);
	tdata_free(&d);
}
END_TEST

START_TEST(test_flip_every_byte)
{
	/* Each trace kind with every bit of a byte flipped, then its low bit. */
	uint8_t mask = (_i & 1) ? 0x01 : 0xFF;
	struct layout lo;
	struct tdata d;
	char path[512], bad[512];
	uint8_t *b;
	size_t n, i, clean = 0;

	small_trace(&d, path, sizeof(path), _i / 2);
	tpath(bad, sizeof(bad), "flip.rrt");
	b = slurp(path, &n);
	ck_assert_uint_lt(n, 2048);
	parse_layout(b, n, &lo);
	for (i = 0; i < n; i++) {
		int failed, truncated, open_failed, vrc;
		size_t got;
		struct rlb_trace_info info;
		struct rlb_err err = {0};

		b[i] ^= mask;
		spit(bad, b, n);
		b[i] ^= mask;
		got = read_damaged(bad, &d, &failed, &truncated, &open_failed);
		vrc = verify_both(bad, &info, &err);
		ck_assert_msg((vrc != 0) == failed, "byte %zu: verify %d, read %d (%s)",
			      i, vrc, failed, err.msg);
		if (!failed) {
			/*
			 * A byte that does not matter: everything reads back.
			 * In relibra's own frames only the unused low bits of
			 * the seek table descriptor (5 bytes from the end) are
			 * such; zstd's compressed blocks have a few bits whose
			 * flip decodes to the same content (the checksum
			 * proves it is the same).
			 */
			ck_assert_msg(got == d.n && !truncated,
				      "byte %zu: clean read of %zu sequences, truncated %d",
				      i, got, truncated);
			ck_assert_msg((i == n - 5 && mask == 0x01) ||
				      in_data_block(&lo, i),
				      "byte %zu (mask 0x%02x) changed nothing", i, mask);
			clean++;
		}
	}
	ck_assert_uint_le(clean, 1 + n / 64);
	free(b);
	unlink(bad);
	unlink(path);
	tdata_free(&d);
}
END_TEST

/* ---- read-ahead ---- */

/* A trace of 60 sequences in 30 steps over many small frames. */
static void ahead_trace(struct tdata *d, char *path, size_t n, struct layout *lo)
{
	static const uint32_t lens[] = { 3, 50, 200 };
	struct rlb_trace_header h;
	size_t len;
	uint8_t *b;

	make_header(&h, 64, 4, 3, RLB_TRACE_F_GATES);
	tdata_gen(d, &h, 60, 2, lens, 3, 5);
	tpath(path, n, "ahead.rrt");
	write_trace(path, d, 256, 0);
	b = slurp(path, &len);
	parse_layout(b, len, lo);
	ck_assert_uint_ge(lo->nframes, 40);
	free(b);
}

START_TEST(test_read_ahead)
{
	struct rlb_trace_reader *r;
	struct rlb_err err = {0};
	struct rlb_seq s;
	struct layout lo;
	struct tdata d;
	const uint32_t *steps;
	size_t nsteps, i, op, reads = 0, seeks = 0;
	char path[512];
	unsigned t;
	int rc;

	ahead_trace(&d, path, sizeof(path), &lo);
	/* A whole read on 1 to 4 threads: the same sequences, all frames read ahead. */
	for (t = 0; t <= 4; t++) {
		ck_assert_int_eq(rlb_trace_reader_open(&r, path, &err), 0);
		ck_assert_int_eq(rlb_trace_reader_set_threads(r, t, &err), 0);
		for (i = 0; (rc = rlb_trace_reader_next(r, &s, &err)) == 1; i++) {
			ck_assert_uint_lt(i, d.n);
			ck_assert_msg(seq_equal(&d, i, &s), "%u threads: sequence %zu", t, i);
		}
		ck_assert_msg(rc == 0, "%u threads: %s", t, err.msg);
		ck_assert_uint_eq(i, d.n);
		ck_assert_uint_eq(rlb_rrt_reader_frames_ahead(r), t >= 2 ? lo.nframes : 0);
		rlb_trace_reader_free(r);
	}

	/*
	 * A seeded walk of reads, seeks, rewinds and thread changes, in the
	 * middle of frames and of what was read ahead: every read gives the
	 * sequence at the position.
	 */
	ck_assert_int_eq(rlb_trace_reader_open(&r, path, &err), 0);
	ck_assert_int_eq(rlb_trace_reader_steps(r, &steps, &nsteps, &err), 0);
	ck_assert_uint_eq(nsteps, 30);
	ck_assert_int_eq(rlb_trace_reader_set_threads(r, 3, &err), 0);
	rng_state = 42;
	for (op = 0, i = 0; op < 4000; op++) {
		uint32_t x = rng() % 100;

		if (x < 85) {
			rc = rlb_trace_reader_next(r, &s, &err);
			ck_assert_msg(rc == (i < d.n), "op %zu: next %d (%s)", op, rc, err.msg);
			if (rc == 1)
				ck_assert_msg(seq_equal(&d, i++, &s), "op %zu: sequence %zu", op, i - 1);
			reads++;
		} else if (x < 95) {
			size_t j = rng() % nsteps;

			ck_assert_int_eq(rlb_trace_reader_seek_step(r, steps[j], &err), 0);
			i = 2 * j;
			seeks++;
		} else if (x < 98) {
			ck_assert_int_eq(rlb_trace_reader_rewind(r, &err), 0);
			i = 0;
		} else {
			ck_assert_int_eq(rlb_trace_reader_set_threads(r, rng() % 5, &err), 0);
		}
	}
	ck_assert_uint_gt(reads, 3000);
	ck_assert_uint_gt(seeks, 300);
	rlb_trace_reader_free(r);
	unlink(path);
	tdata_free(&d);
}
END_TEST

/*
 * Damage in a frame well after the first: with read-ahead the sequences
 * before it come first, then the error of N = 1 (flipped bytes) or the
 * end (the file cut inside it).
 */
START_TEST(test_read_ahead_damage)
{
	struct layout lo;
	struct tdata d;
	char path[512], bad[512], at[64];
	uint8_t *b;
	size_t n, k, f, expect, got, frames[3];
	unsigned t, c;

	ahead_trace(&d, path, sizeof(path), &lo);
	tpath(bad, sizeof(bad), "ahead-bad.rrt");
	b = slurp(path, &n);
	frames[0] = 1;
	frames[1] = lo.nframes / 2;
	frames[2] = lo.nframes - 1;
	for (c = 0; c < 3; c++) {
		uint64_t start, mid;

		k = frames[c];
		start = lo.end[k - 1];
		mid = (start + 9 + lo.end[k] - 4) / 2;	/* in its compressed blocks */
		for (f = 0, expect = 0; f < k; f++)
			expect += lo.seqs[f];
		snprintf(at, sizeof(at), "data frame at offset %llu: ",
			 (unsigned long long)start);
		for (t = 0; t < 2; t++) {
			struct rlb_err e1, e2;
			int failed, truncated, open_failed;

			if (t == 0) {	/* four bytes flipped */
				for (f = 0; f < 4; f++)
					b[mid + f] ^= 0xFF;
				spit(bad, b, n);
				for (f = 0; f < 4; f++)
					b[mid + f] ^= 0xFF;
			} else {	/* cut inside it */
				spit(bad, b, (size_t)mid);
			}
			got = read_damaged_on(bad, &d, 1, &failed, &truncated,
					      &open_failed, &e1);
			ck_assert_uint_eq(got, expect);
			ck_assert_int_eq(failed, t == 0);
			ck_assert_int_eq(truncated, t == 1);
			if (t == 0)
				ck_assert_msg(strstr(e1.msg, at) != NULL, "'%s' lacks '%s'",
					      e1.msg, at);
			got = read_damaged_on(bad, &d, 4, &failed, &truncated,
					      &open_failed, &e2);
			ck_assert_uint_eq(got, expect);
			ck_assert_int_eq(failed, t == 0);
			ck_assert_int_eq(truncated, t == 1);
			ck_assert_int_eq(e2.code, e1.code);
			ck_assert_str_eq(e2.msg, e1.msg);
			{
				struct rlb_trace_info info;
				struct rlb_err err = {0};

				ck_assert_int_eq(verify_both(bad, &info, &err), t == 0 ? e1.code : 0);
				ck_assert_uint_eq(info.sequences, expect);
			}
		}
	}
	free(b);
	unlink(bad);
	unlink(path);
	tdata_free(&d);
}
END_TEST

/* ---- killed writers ---- */

#define KILL_TOPK 2
#define KILL_LAYERS 3

static void kill_seq(size_t i, struct rlb_seq *q, uint16_t *ids)
{
	size_t j, n;

	rng_state = 1000 + i;
	q->step = (uint32_t)(i / 5);
	q->group = (uint32_t)(i % 5);
	q->sample = (uint32_t)i;
	q->tokens = 1 + rng() % 60;
	q->gates = NULL;
	n = (size_t)q->tokens * KILL_TOPK * KILL_LAYERS;
	for (j = 0; j < n; j++)
		ids[j] = (uint16_t)(rng() % 32);
	q->ids = ids;
}

static void kill_child(const char *path)
{
	static uint16_t ids[60 * KILL_TOPK * KILL_LAYERS];
	struct rlb_trace_writer_opts o = { .level = 1, .frame_bytes = 300 };
	struct rlb_trace_header h;
	struct rlb_trace_writer *w;
	struct rlb_seq q;
	size_t i;

	make_header(&h, 32, KILL_TOPK, KILL_LAYERS, 0);
	if (rlb_trace_writer_open(&w, path, &h, &o, NULL) != 0)
		_exit(3);
	for (i = 0;; i++) {
		kill_seq(i, &q, ids);
		if (rlb_trace_writer_append(w, &q) != 0)
			_exit(4);
	}
}

static off_t file_size(const char *path)
{
	struct stat st;

	return stat(path, &st) == 0 ? st.st_size : -1;
}

START_TEST(test_kill9_writer)
{
	static const off_t points[] = { 200, 1000, 6000, 30000 };
	static uint16_t ids[60 * KILL_TOPK * KILL_LAYERS];
	char path[512], tmp[600];
	size_t p;

	tpath(path, sizeof(path), "killed.rrt");
	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	for (p = 0; p < sizeof(points) / sizeof(points[0]); p++) {
		struct rlb_trace_reader *r;
		struct rlb_trace_info info;
		struct rlb_err err = {0};
		struct rlb_seq s, q;
		struct timespec ts = { 0, 200000 };
		size_t i = 0, polls = 0;
		pid_t pid;
		int st, rc;

		unlink(tmp);
		pid = fork();
		ck_assert_int_ge(pid, 0);
		if (pid == 0)
			kill_child(path);
		while (file_size(tmp) < points[p] && polls++ < 500000)
			nanosleep(&ts, NULL);
		kill(pid, SIGKILL);
		ck_assert_int_eq(waitpid(pid, &st, 0), pid);
		ck_assert(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
		ck_assert_int_ge(file_size(tmp), points[p]);
		ck_assert_int_ne(access(path, F_OK), 0);
		ck_assert_msg(rlb_trace_reader_open(&r, tmp, &err) == 0, "%s", err.msg);
		ck_assert_int_eq(rlb_trace_reader_truncated(r), 1);
		while ((rc = rlb_trace_reader_next(r, &s, &err)) == 1) {
			kill_seq(i, &q, ids);
			ck_assert_uint_eq(s.step, q.step);
			ck_assert_uint_eq(s.sample, q.sample);
			ck_assert_uint_eq(s.tokens, q.tokens);
			ck_assert(memcmp(s.ids, q.ids, (size_t)q.tokens * KILL_TOPK *
					 KILL_LAYERS * sizeof(*ids)) == 0);
			i++;
		}
		ck_assert_msg(rc == 0, "after %zu sequences: %s", i, err.msg);
		rlb_trace_reader_free(r);
		ck_assert_int_eq(rlb_trace_verify(tmp, &info, &err), 0);
		ck_assert_int_eq(info.truncated, 1);
		ck_assert_int_eq(info.has_seek_table, 0);
		ck_assert_uint_eq(info.sequences, i);
		/* Every complete frame: at most one frame's worth is lost. */
		ck_assert_uint_ge(info.valid_bytes + 300 + 1000, (uint64_t)file_size(tmp));
		if (points[p] > 1000)
			ck_assert_uint_gt(i, 0);
	}
	unlink(tmp);
}
END_TEST

/*
 * The tiny example of trace_format/examples/: regenerated here and
 * compared with the shipped file.  RLB_TRACE_EXAMPLE_OUT=PATH writes it
 * to PATH instead (how the shipped file is made).
 */
static void example_data(struct tdata *d)
{
	struct rlb_trace_header h;
	static const uint32_t tokens[3] = { 5, 3, 4 };
	static const uint32_t step[3] = { 0, 0, 1 };
	static const uint32_t sample[3] = { 0, 1, 0 };
	size_t i, l, t, k;

	memset(&h, 0, sizeof(h));
	h.experts = 16;
	h.topk = 2;
	h.moe_layers = 4;
	strcpy(h.model, "tiny");
	strcpy(h.source, "api");
	d->h = h;
	d->n = 3;
	d->seqs = calloc(3, sizeof(*d->seqs));
	for (i = 0; i < 3; i++) {
		struct tseq *q = &d->seqs[i];

		q->s.step = step[i];
		q->s.group = 0;
		q->s.sample = sample[i];
		q->s.tokens = tokens[i];
		q->ids = malloc(4 * tokens[i] * 2 * sizeof(*q->ids));
		for (l = 0; l < 4; l++)
			for (t = 0; t < tokens[i]; t++)
				for (k = 0; k < 2; k++)
					q->ids[(l * tokens[i] + t) * 2 + k] =
						(uint16_t)((3 * l + t / 2 + 7 * k + i) % 16);
		q->s.ids = q->ids;
	}
}

START_TEST(test_example_file)
{
	const char *out = getenv("RLB_TRACE_EXAMPLE_OUT");
	char path[512], shipped[1024];
	struct tdata d;
	struct rlb_trace_info info;
	struct rlb_err err = {0};
	uint8_t *a, *b;
	size_t na, nb;

	example_data(&d);
	if (out && *out) {
		write_trace(out, &d, 0, 0);
		tdata_free(&d);
		return;
	}
	tpath(path, sizeof(path), "tiny.rrt");
	write_trace(path, &d, 0, 0);
	snprintf(shipped, sizeof(shipped), "%s/../trace_format/examples/tiny.rrt",
		 rlb_test_srcdir());
	/* The shipped file decodes to the same sequences ... */
	read_compare(shipped, &d);
	ck_assert_int_eq(rlb_trace_verify(shipped, &info, &err), 0);
	ck_assert_uint_eq(info.steps, 2);
	/* ... and, with the same zstd, is byte for byte what the writer makes. */
	a = slurp(path, &na);
	b = slurp(shipped, &nb);
	if (ZSTD_versionNumber() == 10504) {
		ck_assert_uint_eq(na, nb);
		ck_assert(memcmp(a, b, na) == 0);
	}
	free(a);
	free(b);
	unlink(path);
	tdata_free(&d);
}
END_TEST

/*
 * A sorted trace whose records were written by another tool: the header
 * of our writer, then one data frame of a single record (a trace cut
 * before its step index, so nothing else must agree with it).
 */
static void write_handmade(const char *path, uint32_t flags, int coding,
			   const uint8_t *rec, size_t n)
{
	struct rlb_trace_writer_opts o = { 0, 0, coding };
	struct rlb_trace_header h;
	struct rlb_trace_writer *w;
	struct rlb_err err;
	uint8_t head[8 + RRT_H_SIZE], frame[512];
	ZSTD_CCtx *cctx = ZSTD_createCCtx();
	size_t z;
	FILE *fp;

	make_header(&h, 16, 2, 1, flags);
	ck_assert_msg(rlb_trace_writer_open(&w, path, &h, &o, &err) == 0, "%s", err.msg);
	ck_assert_msg(rlb_trace_writer_close(w, &err) == 0, "%s", err.msg);
	fp = fopen(path, "rb");
	ck_assert_ptr_nonnull(fp);
	ck_assert_uint_eq(fread(head, 1, sizeof(head), fp), sizeof(head));
	fclose(fp);
	ck_assert_ptr_nonnull(cctx);
	ck_assert(!ZSTD_isError(ZSTD_CCtx_setParameter(cctx, ZSTD_c_checksumFlag, 1)));
	z = ZSTD_compress2(cctx, frame, sizeof(frame), rec, n);
	ck_assert(!ZSTD_isError(z));
	ZSTD_freeCCtx(cctx);
	fp = fopen(path, "wb");
	ck_assert_ptr_nonnull(fp);
	ck_assert_uint_eq(fwrite(head, 1, sizeof(head), fp), sizeof(head));
	ck_assert_uint_eq(fwrite(frame, 1, z, fp), z);
	ck_assert_int_eq(fclose(fp), 0);
}

/* Read the one sequence of PATH: 1, or the error with its message in MSG. */
static int read_one(const char *path, struct rlb_err *err)
{
	struct rlb_trace_reader *r;
	struct rlb_seq seq;
	int ret;

	ck_assert_msg(rlb_trace_reader_open(&r, path, err) == 0, "%s", err->msg);
	ret = rlb_trace_reader_next(r, &seq, err);
	if (ret == 1)
		ck_assert_uint_eq(seq.tokens, 3);
	rlb_trace_reader_free(r);
	return ret;
}

START_TEST(test_sorted_checked)
{
	/* step 4, group 0, sample 1, 3 tokens; one layer of 3 x 2 ids */
	uint8_t raw[16 + 6] = { 4, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 3, 0, 0, 0,
				1, 5, 2, 9, 3, 3 };
	/* the same as ranks: an empty list, so rank r is id r */
	uint8_t rank[16 + 1 + 6];
	struct rlb_err err;
	char path[512];

	memcpy(rank, raw, 16);
	rank[16] = 0;
	memcpy(rank + 17, raw + 16, 6);
	tpath(path, sizeof(path), "handmade.rrt");
	/* Ascending (equal ids included) reads, with either coding. */
	write_handmade(path, RLB_TRACE_F_SORTED, RLB_TRACE_CODING_RAW, raw, sizeof(raw));
	ck_assert_msg(read_one(path, &err) == 1, "%s", err.msg);
	write_handmade(path, RLB_TRACE_F_SORTED, RLB_TRACE_CODING_RANK, rank, sizeof(rank));
	ck_assert_msg(read_one(path, &err) == 1, "%s", err.msg);
	/* Token 1 out of order: an error naming the record, layer and token. */
	raw[18] = 9;
	raw[19] = 2;
	rank[19] = 9;
	rank[20] = 2;
	write_handmade(path, RLB_TRACE_F_SORTED, RLB_TRACE_CODING_RAW, raw, sizeof(raw));
	ck_assert_int_eq(read_one(path, &err), RLB_ECORRUPT);
	ck_assert_str_eq(strstr(err.msg, "data frame"),
			 "data frame at offset 164: sequence 0: layer 0, token 1: ids not ascending in a sorted trace");
	write_handmade(path, RLB_TRACE_F_SORTED, RLB_TRACE_CODING_RANK, rank, sizeof(rank));
	ck_assert_int_eq(read_one(path, &err), RLB_ECORRUPT);
	ck_assert_str_eq(strstr(err.msg, "data frame"),
			 "data frame at offset 164: sequence 0: layer 0, token 1: ids not ascending in a sorted trace");
	/* An ordered trace keeps the engine's order. */
	write_handmade(path, 0, RLB_TRACE_CODING_RAW, raw, sizeof(raw));
	ck_assert_msg(read_one(path, &err) == 1, "%s", err.msg);
	unlink(path);
}
END_TEST

/*
 * A gate plane holding a weight that is negative or not finite: the
 * reader refuses it as corruption, naming layer, token and column.
 */
START_TEST(test_gates_checked)
{
	/* step 4, group 0, sample 1, 3 tokens; one layer of 3 x 2 ids, then 4 gate planes */
	uint8_t rec[16 + 6 + 4 * 6] = { 4, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 3, 0, 0, 0,
					1, 5, 2, 9, 3, 3 };
	static const struct {
		uint32_t bits;
		const char *msg;	/* NULL: reads */
	} v[] = {
		{ 0x3f000000u, NULL },		/* 0.5 */
		{ 0x00000000u, NULL },		/* 0 */
		{ 0x80000000u, NULL },		/* -0 */
		{ 0x00000001u, NULL },		/* the smallest subnormal */
		{ 0x7f7fffffu, NULL },		/* FLT_MAX */
		{ 0x7f800000u, "gate inf is negative or not finite" },
		{ 0xff800000u, "gate -inf is negative or not finite" },
		{ 0x7fc00000u, "gate nan is negative or not finite" },
		{ 0x7f800001u, "gate nan is negative or not finite" },
		{ 0xbf800000u, "gate -1 is negative or not finite" },
		{ 0x80000001u, "gate -1.40129846e-45 is negative or not finite" },
	};
	struct rlb_err err;
	char path[512], want[256];
	size_t i, j;

	tpath(path, sizeof(path), "handmade-gates.rrt");
	for (i = 0; i < sizeof(v) / sizeof(v[0]); i++) {
		/* every weight 0.5, then token 2, column 1 (value 5 of 6) set */
		for (j = 0; j < 6; j++) {
			uint32_t bits = j == 5 ? v[i].bits : 0x3f000000u;
			unsigned b;

			for (b = 0; b < 4; b++)
				rec[22 + b * 6 + j] = (uint8_t)(bits >> (8 * b));
		}
		write_handmade(path, RLB_TRACE_F_GATES, RLB_TRACE_CODING_RAW, rec, sizeof(rec));
		if (!v[i].msg) {
			ck_assert_msg(read_one(path, &err) == 1, "0x%08x: %s", v[i].bits, err.msg);
			continue;
		}
		ck_assert_int_eq(read_one(path, &err), RLB_ECORRUPT);
		snprintf(want, sizeof(want),
			 "data frame at offset 164: sequence 0: layer 0, token 2, column 1: %s",
			 v[i].msg);
		ck_assert_msg(strstr(err.msg, "data frame"), "%s", err.msg);
		ck_assert_str_eq(strstr(err.msg, "data frame"), want);
	}
	unlink(path);
}
END_TEST

Suite *rlb_suite_trace(void)
{
	Suite *s = suite_create("trace");
	TCase *tc = tcase_create("format");
	TCase *rb = tcase_create("robustness");

	tcase_add_test(tc, test_crc32c);
	tcase_add_test(tc, test_id_bytes_and_config);
	tcase_add_loop_test(tc, test_roundtrip, 0, sizeof(shapes) / sizeof(shapes[0]));
	tcase_add_test(tc, test_many_steps_and_seek);
	tcase_add_test(tc, test_step_seqs_with_and_without_index);
	tcase_add_test(tc, test_steps_without_index_defer_checksum);
	tcase_add_test(tc, test_index_error_offsets);
	tcase_add_test(tc, test_empty_trace);
	tcase_add_test(tc, test_data_after_seek_table);
	tcase_add_test(tc, test_append_validation);
	tcase_add_test(tc, test_append_gate_extremes);
	tcase_add_test(tc, test_append_too_large);
	tcase_add_test(tc, test_writer_open_errors);
	tcase_add_test(tc, test_abort_removes_output);
	tcase_add_test(tc, test_reader_open_errors);
	tcase_add_test(tc, test_layer_pattern_header);
	tcase_add_test(tc, test_versions_and_flags);
	tcase_add_test(tc, test_example_file);
	tcase_add_test(tc, test_read_ahead);
	tcase_add_test(tc, test_read_ahead_damage);
	tcase_add_test(tc, test_sorted_checked);
	tcase_add_test(tc, test_gates_checked);
	suite_add_tcase(s, tc);
	tcase_add_loop_test(rb, test_truncate_every_offset, 0, 2);
	tcase_add_loop_test(rb, test_flip_every_byte, 0, 4);
	tcase_add_test(rb, test_kill9_writer);
	tcase_set_timeout(rb, 600);
	suite_add_tcase(s, rb);
	return s;
}
