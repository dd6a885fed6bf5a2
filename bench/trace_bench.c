/*
 * trace_bench.c - throughput and size of the trace format (.rrt) on
 * segment-correlated synthetic routing shaped like qwen3-30b-a3b (128
 * experts, top-8, 48 MoE layers): write tokens/s, decode bytes/s of raw
 * u8 ids through rlb_trace_reader_next on one core, stored bytes per
 * (token, layer) and the ratio to raw u8 ids, ordered and sorted.  Times
 * are the thread's CPU time (user + system), so other load on the machine
 * does not stretch them.
 *
 * usage: trace_bench [-n TOKENS] [-l LEVEL] [-f FRAME_BYTES] [-s SEED]
 *                    [-d DIR] [--layouts] [--read TRACE]
 */
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zstd.h>

#include "relibra.h"

#define EXPERTS 128
#define TOPK 8
#define LAYERS 48
#define SEQ_TOKENS 4096
#define SEQS_PER_STEP 16
#define PREFERRED 16		/* experts a token segment prefers */
#define P_PREFERRED 0.7		/* share of picks from the preferred set */
#define SEG_MIN 32
#define SEG_MAX 512

static uint64_t rs = 0x9E3779B97F4A7C15ull;

static uint64_t rnd(void)
{
	rs ^= rs << 13;
	rs ^= rs >> 7;
	rs ^= rs << 17;
	return rs;
}

/* Per layer: a 65536-entry inverse CDF of its base popularity. */
static uint8_t pick_table[LAYERS][65536];

static void make_popularity(void)
{
	int l, e, j;

	for (l = 0; l < LAYERS; l++) {
		/* Mildly skewed layers, one in eight heavy-tailed. */
		double s = (l % 8 == 5) ? 1.0 : 0.3, w[EXPERTS], tot = 0, acc = 0;
		int perm[EXPERTS];

		for (e = 0; e < EXPERTS; e++)
			perm[e] = e;
		for (e = EXPERTS - 1; e > 0; e--) {
			int k = (int)(rnd() % (uint64_t)(e + 1)), t = perm[e];

			perm[e] = perm[k];
			perm[k] = t;
		}
		for (e = 0; e < EXPERTS; e++) {
			w[perm[e]] = pow(e + 1, -s);
			tot += w[perm[e]];
		}
		for (e = 0, j = 0; e < EXPERTS; e++) {
			acc += w[e] / tot;
			while (j < 65536 && (j + 0.5) / 65536.0 < acc)
				pick_table[l][j++] = (uint8_t)e;
		}
		while (j < 65536)
			pick_table[l][j++] = EXPERTS - 1;
	}
}

/*
 * One sequence: runs of 32-512 tokens share a preferred set of 16
 * experts; each of a token's 8 distinct picks comes from that set with
 * probability 0.7, else from the layer's popularity; pick order is the
 * engine's column order.
 */
static void gen_seq(uint16_t *ids, uint32_t T)
{
	uint32_t l, t, k, j;
	uint16_t pref[PREFERRED];

	for (l = 0; l < LAYERS; l++) {
		uint32_t left = 0;

		for (t = 0; t < T; t++) {
			uint16_t *row = ids + ((size_t)l * T + t) * TOPK;

			if (left == 0) {
				left = SEG_MIN + (uint32_t)(rnd() % (SEG_MAX - SEG_MIN + 1));
				for (j = 0; j < PREFERRED; j++)
					pref[j] = pick_table[l][rnd() & 0xFFFF];
			}
			left--;
			for (k = 0; k < TOPK; k++) {
				uint16_t e;
				int dup;

				do {
					uint64_t r = rnd();

					if ((double)(r >> 40) < P_PREFERRED * (1 << 24))
						e = pref[r % PREFERRED];
					else
						e = pick_table[l][r & 0xFFFF];
					dup = 0;
					for (j = 0; j < k; j++)
						dup |= row[j] == e;
				} while (dup);
				row[k] = e;
			}
		}
	}
}

/* CPU time of this thread: the work of one core, whatever else runs. */
static double now_s(void)
{
	return (double)rlb_thread_cpu_ns() * 1e-9;
}

static off_t fsize(const char *path)
{
	FILE *f = fopen(path, "rb");
	long n;

	if (!f)
		return -1;
	fseek(f, 0, SEEK_END);
	n = ftell(f);
	fclose(f);
	return n;
}

/* Decode the whole trace: seconds (best of reps), tokens and layers seen. */
static int decode(const char *path, int reps, double *best, uint64_t *tokens,
		  uint32_t *layers, uint32_t *topk)
{
	struct rlb_trace_reader *r;
	struct rlb_err err = {0};
	struct rlb_seq s;
	int rep, rc = 0;
	uint64_t sum = 0;

	if (rlb_trace_reader_open(&r, path, &err) != 0) {
		fprintf(stderr, "trace_bench: %s\n", err.msg);
		return -1;
	}
	*layers = rlb_trace_reader_header(r)->moe_layers;
	*topk = rlb_trace_reader_header(r)->topk;
	*best = 1e30;
	for (rep = 0; rep < reps; rep++) {
		double t0 = now_s();

		*tokens = 0;
		rlb_trace_reader_rewind(r, &err);
		while ((rc = rlb_trace_reader_next(r, &s, &err)) == 1) {
			*tokens += s.tokens;
			sum += s.ids[s.tokens / 2];
		}
		if (rc < 0) {
			fprintf(stderr, "trace_bench: %s\n", err.msg);
			break;
		}
		t0 = now_s() - t0;
		if (t0 < *best)
			*best = t0;
	}
	rlb_trace_reader_free(r);
	if (sum == 1)
		fprintf(stderr, " ");	/* keep the reads */
	return rc < 0 ? -1 : 0;
}

struct mode {
	const char *name;
	uint32_t flags;
	int coding;
};

static const struct mode modes[] = {
	{ "ordered", 0, 0 },
	{ "ordered-raw", 0, RLB_TRACE_CODING_RAW },
	{ "sorted", RLB_TRACE_F_SORTED, 0 },
	{ "sorted-raw", RLB_TRACE_F_SORTED, RLB_TRACE_CODING_RAW },
};

static void report(const char *name, double write_s, uint64_t tokens,
		   uint32_t layers, uint32_t topk, off_t bytes, double dec_s)
{
	double raw = (double)tokens * layers * topk;	/* u8 id bytes */

	printf("%-12s", name);
	if (write_s > 0)
		printf(" write %6.2f Mtok/s", tokens / write_s / 1e6);
	printf("  decode %6.0f MB/s  %.3f B/(token,layer)  ratio %.3f (1/%.3f)\n",
	       raw / dec_s / 1e6, (double)bytes / ((double)tokens * layers),
	       raw / (double)bytes, raw / (double)bytes);
}

/*
 * The writer's rank coding with other chunk sizes and list lengths (the
 * writer uses 128 tokens and at most 32 ids): one layer of one sequence.
 */
static size_t rank_code(const uint16_t *ids, uint32_t T, uint32_t C,
			uint32_t N, uint8_t *o)
{
	uint8_t *start = o;
	uint32_t t0, c, i, e, j, n;

	for (t0 = 0; t0 < T; t0 += c) {
		const uint16_t *p = ids + (size_t)t0 * TOPK;
		uint32_t cnt[EXPERTS] = { 0 }, thr, list[256];
		uint8_t rank[EXPERTS], listed[EXPERTS] = { 0 };

		c = T - t0 < C ? T - t0 : C;
		for (i = 0; i < c * TOPK; i++)
			cnt[p[i]]++;
		thr = c * TOPK / EXPERTS;
		for (n = 0, e = 0; e < EXPERTS; e++) {
			if (cnt[e] <= thr || cnt[e] < 2)
				continue;
			for (j = n++; j > 0 && cnt[list[j - 1]] < cnt[e]; j--)
				list[j] = list[j - 1];
			list[j] = e;
		}
		n = n < N ? n : N;
		*o++ = (uint8_t)n;
		for (j = 0; j < n; j++) {
			*o++ = (uint8_t)list[j];
			rank[list[j]] = (uint8_t)j;
			listed[list[j]] = 1;
		}
		for (e = 0, j = n; e < EXPERTS; e++)
			if (!listed[e])
				rank[e] = (uint8_t)j++;
		for (i = 0; i < c * TOPK; i++)
			*o++ = rank[p[i]];
	}
	return (size_t)(o - start);
}

static void rank_sweep(uint16_t **seqs, int nseq, int level)
{
	static const uint32_t chunks[] = { 32, 64, 128, 256, 4096 };
	static const uint32_t lists[] = { 16, 32, 64 };
	size_t n = (size_t)SEQ_TOKENS * LAYERS * TOPK;
	uint8_t *buf = malloc(2 * n), *c = malloc(ZSTD_compressBound(2 * n));
	unsigned a, b;
	int s;

	for (a = 0; a < sizeof(chunks) / sizeof(chunks[0]); a++)
		for (b = 0; b < sizeof(lists) / sizeof(lists[0]); b++) {
			size_t raw = 0, comp = 0;

			for (s = 0; s < nseq; s++) {
				size_t len = 0;
				uint32_t l;

				for (l = 0; l < LAYERS; l++)
					len += rank_code(seqs[s] + (size_t)l * SEQ_TOKENS * TOPK,
							 SEQ_TOKENS, chunks[a], lists[b], buf + len);
				comp += ZSTD_compress(c, ZSTD_compressBound(2 * n), buf, len, level);
				raw += n;
			}
			printf("  zstd -%d rank-coded, chunk %4u tokens, list <= %2u   ratio %.3f\n",
			       level, chunks[a], lists[b], (double)raw / (double)comp);
		}
	free(buf);
	free(c);
}

/*
 * zstd parameters on the raw records of a written trace: its data frames
 * decompressed, then compressed again frame by frame with level and
 * minimum match variants; prints ratio and single-core speeds.
 */
static void zstd_params(const char *path)
{
	static const int cfg[][2] = { { 1, 0 }, { 2, 0 }, { 3, 0 }, { 3, 6 }, { 3, 7 } };
	FILE *f = fopen(path, "rb");
	uint8_t *b, *raw, *cb, *out;
	size_t n, *fr, nf = 0, rlen = 0, pos = 0, i, k;
	uint32_t ne;
	uint64_t toff;
	ZSTD_DCtx *d = ZSTD_createDCtx();

	if (!f)
		return;
	fseek(f, 0, SEEK_END);
	n = (size_t)ftell(f);
	fseek(f, 0, SEEK_SET);
	b = malloc(n);
	if (fread(b, 1, n, f) != n) {
		fclose(f);
		free(b);
		return;
	}
	fclose(f);
	ne = rlb_get_u32(b + n - 9);
	toff = n - (8 + 8 * (uint64_t)ne + 9);
	raw = malloc(n * 4);
	fr = malloc(ne * sizeof(*fr));
	for (i = 0; i < ne; i++) {
		uint32_t c = rlb_get_u32(b + toff + 8 + 8 * i), r = rlb_get_u32(b + toff + 12 + 8 * i);

		if (r) {
			ZSTD_decompressDCtx(d, raw + rlen, r, b + pos, c);
			fr[nf++] = r;
			rlen += r;
		}
		pos += c;
	}
	cb = malloc(ZSTD_compressBound(rlen));
	out = malloc((size_t)RLB_TRACE_MAX_SEQ_TOKENS);
	for (k = 0; k < sizeof(cfg) / sizeof(cfg[0]); k++) {
		ZSTD_CCtx *cc = ZSTD_createCCtx();
		size_t cp = 0, off = 0, *cs = malloc(nf * sizeof(*cs));
		double tc, td = 1e30;
		int rep;

		ZSTD_CCtx_setParameter(cc, ZSTD_c_compressionLevel, cfg[k][0]);
		if (cfg[k][1])
			ZSTD_CCtx_setParameter(cc, ZSTD_c_minMatch, cfg[k][1]);
		tc = now_s();
		for (i = 0; i < nf; i++) {
			cs[i] = ZSTD_compress2(cc, cb + cp, ZSTD_compressBound(fr[i]), raw + off, fr[i]);
			cp += cs[i];
			off += fr[i];
		}
		tc = now_s() - tc;
		for (rep = 0; rep < 3; rep++) {
			double t = now_s();

			for (i = 0, pos = 0; i < nf; i++) {
				ZSTD_decompressDCtx(d, out, RLB_TRACE_MAX_SEQ_TOKENS, cb + pos, cs[i]);
				pos += cs[i];
			}
			t = now_s() - t;
			td = t < td ? t : td;
		}
		printf("  zstd -%d%s%s raw records / compressed %.3f  compress %.0f MB/s  decompress %.0f MB/s\n",
		       cfg[k][0], cfg[k][1] ? " minMatch " : "",
		       cfg[k][1] ? (cfg[k][1] == 6 ? "6" : "7") : "           ",
		       (double)rlen / cp, rlen / tc / 1e6, rlen / td / 1e6);
		free(cs);
		ZSTD_freeCCtx(cc);
	}
	free(b);
	free(raw);
	free(fr);
	free(cb);
	free(out);
	ZSTD_freeDCtx(d);
}

/* zstd alone on other layouts of the same ids, for the layout table. */
static void layouts(uint16_t **seqs, int nseq, int level)
{
	static const char *names[] = {
		"engine rows [token][layer][k]",
		"per layer [token][k] (format)",
		"per (layer, k) token columns",
		"sorted, per layer [token][k]",
		"sorted+delta, per layer [token][k]",
		"sorted+delta, (layer, k) columns",
	};
	size_t n = (size_t)SEQ_TOKENS * LAYERS * TOPK, i;
	uint8_t *buf = malloc(n), *c = malloc(ZSTD_compressBound(n));
	int v, s;

	for (v = 0; v < 6; v++) {
		size_t raw = 0, comp = 0;

		for (s = 0; s < nseq; s++) {
			const uint16_t *ids = seqs[s];
			uint32_t l, t, k;

			for (l = 0; l < LAYERS; l++)
				for (t = 0; t < SEQ_TOKENS; t++) {
					uint16_t row[TOPK];

					memcpy(row, ids + ((size_t)l * SEQ_TOKENS + t) * TOPK, sizeof(row));
					if (v >= 3)
						for (k = 1; k < TOPK; k++) {
							uint16_t x = row[k];
							int j = (int)k - 1;

							while (j >= 0 && row[j] > x) {
								row[j + 1] = row[j];
								j--;
							}
							row[j + 1] = x;
						}
					for (k = TOPK; v >= 4 && k-- > 1;)
						row[k] = (uint16_t)(row[k] - row[k - 1]);
					for (k = 0; k < TOPK; k++) {
						size_t at;

						if (v == 0)
							at = ((size_t)t * LAYERS + l) * TOPK + k;
						else if (v == 2 || v == 5)
							at = ((size_t)l * TOPK + k) * SEQ_TOKENS + t;
						else
							at = ((size_t)l * SEQ_TOKENS + t) * TOPK + k;
						buf[at] = (uint8_t)row[k];
					}
				}
			i = ZSTD_compress(c, ZSTD_compressBound(n), buf, n, level);
			raw += n;
			comp += i;
		}
		printf("  zstd -%d %-36s ratio %.3f\n", level, names[v],
		       (double)raw / (double)comp);
	}
	free(buf);
	free(c);
}

int main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "layouts", no_argument, NULL, 'L' },
		{ "read", required_argument, NULL, 'r' },
		{ NULL, 0, NULL, 0 },
	};
	uint64_t ntokens = 262144;
	int level = 3, do_layouts = 0, opt, nseq, i, m;
	size_t frame_bytes = 0;
	const char *dir = "/tmp", *readpath = NULL;
	uint16_t **seqs;
	char path[4096];

	while ((opt = getopt_long(argc, argv, "n:l:f:s:d:", longopts, NULL)) != -1) {
		switch (opt) {
		case 'n': ntokens = strtoull(optarg, NULL, 0); break;
		case 'l': level = atoi(optarg); break;
		case 'f': frame_bytes = strtoull(optarg, NULL, 0); break;
		case 's': rs = strtoull(optarg, NULL, 0) | 1; break;
		case 'd': dir = optarg; break;
		case 'L': do_layouts = 1; break;
		case 'r': readpath = optarg; break;
		default:
			fprintf(stderr, "usage: trace_bench [-n TOKENS] [-l LEVEL] [-f FRAME_BYTES] [-s SEED] [-d DIR] [--layouts] [--read TRACE]\n");
			return 2;
		}
	}
	if (readpath) {
		double dec;
		uint64_t tok;
		uint32_t layers, topk;

		if (decode(readpath, 3, &dec, &tok, &layers, &topk) != 0)
			return 1;
		report("file", 0, tok, layers, topk, fsize(readpath), dec);
		return 0;
	}
	nseq = (int)((ntokens + SEQ_TOKENS - 1) / SEQ_TOKENS);
	printf("trace_bench: %d sequences x %d tokens, %d experts, top-%d, %d layers; zstd level %d, frame %zu bytes; %.1f MB of raw u8 ids\n",
	       nseq, SEQ_TOKENS, EXPERTS, TOPK, LAYERS, level,
	       frame_bytes ? frame_bytes : (size_t)8 << 20,
	       (double)nseq * SEQ_TOKENS * LAYERS * TOPK / 1e6);
	make_popularity();
	seqs = malloc((size_t)nseq * sizeof(*seqs));
	for (i = 0; i < nseq; i++) {
		seqs[i] = malloc((size_t)SEQ_TOKENS * LAYERS * TOPK * sizeof(uint16_t));
		gen_seq(seqs[i], SEQ_TOKENS);
	}
	for (m = 0; m < (int)(sizeof(modes) / sizeof(modes[0])); m++) {
		struct rlb_trace_writer_opts o = { .level = level,
						   .frame_bytes = frame_bytes,
						   .coding = modes[m].coding };
		struct rlb_trace_header h;
		struct rlb_trace_writer *w;
		struct rlb_err err = {0};
		double t0, wr, dec;
		uint64_t tok;
		uint32_t layers, topk;

		memset(&h, 0, sizeof(h));
		h.experts = EXPERTS;
		h.topk = TOPK;
		h.moe_layers = LAYERS;
		h.flags = modes[m].flags;
		strcpy(h.model, "qwen3-30b-a3b");
		strcpy(h.source, "synthetic");
		snprintf(path, sizeof(path), "%s/trace_bench-%ld-%s.rrt", dir,
			 (long)getpid(), modes[m].name);
		t0 = now_s();
		if (rlb_trace_writer_open(&w, path, &h, &o, &err) != 0) {
			fprintf(stderr, "trace_bench: %s\n", err.msg);
			return 1;
		}
		for (i = 0; i < nseq; i++) {
			struct rlb_seq s = { .step = (uint32_t)(i / SEQS_PER_STEP),
					     .group = (uint32_t)(i % SEQS_PER_STEP / 4),
					     .sample = (uint32_t)(i % 4),
					     .tokens = SEQ_TOKENS, .ids = seqs[i] };

			if (rlb_trace_writer_append(w, &s) != 0)
				break;
		}
		if (rlb_trace_writer_close(w, &err) != 0) {
			fprintf(stderr, "trace_bench: %s\n", err.msg);
			return 1;
		}
		wr = now_s() - t0;
		if (decode(path, 3, &dec, &tok, &layers, &topk) != 0)
			return 1;
		report(modes[m].name, wr, tok, layers, topk, fsize(path), dec);
		if (do_layouts && (m == 0 || m == 2))
			zstd_params(path);
		unlink(path);
	}
	if (do_layouts) {
		layouts(seqs, nseq < 8 ? nseq : 8, level);
		rank_sweep(seqs, nseq < 8 ? nseq : 8, level);
	}
	for (i = 0; i < nseq; i++)
		free(seqs[i]);
	free(seqs);
	return 0;
}
