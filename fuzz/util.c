/*
 * util.c - helpers of the fuzz targets: inputs as files, the import sink.
 */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>
#include <zstd.h>

#include "config.h"
#include "err.h"
#include "fuzz.h"
#include "import_internal.h"
#include "plan.h"
#include "plan_io.h"
#include "trace.h"

static char dir[PATH_MAX];
static char file[PATH_MAX];
static char again[PATH_MAX];	/* fuzz_plan's copy */

static void cleanup(void)
{
	if (file[0])
		unlink(file);
	if (again[0])
		unlink(again);
	if (dir[0])
		rmdir(dir);
}

static void make_dir(void)
{
	const char *tmp = getenv("TMPDIR");

	if (!dir[0]) {
		snprintf(dir, sizeof(dir), "%s/relibra-fuzz.XXXXXX", tmp ? tmp : "/tmp");
		if (!mkdtemp(dir)) {
			perror("mkdtemp");
			abort();
		}
		atexit(cleanup);
	}
}

const char *fuzz_file(const uint8_t *data, size_t size, const char *name)
{
	FILE *fp;

	make_dir();
	if (file[0])
		unlink(file);
	if (snprintf(file, sizeof(file), "%s/%s", dir, name) >= (int)sizeof(file))
		abort();
	fp = fopen(file, "wb");
	if (!fp || (size && fwrite(data, 1, size, fp) != size) || fclose(fp) != 0) {
		perror(file);
		abort();
	}
	return file;
}

void fuzz_file_head(const char *path, uint8_t *out, size_t n)
{
	FILE *fp = fopen(path, "rb");

	if (!fp || fread(out, 1, n, fp) != n) {
		fprintf(stderr, "%s: cannot read its first %zu bytes\n", path, n);
		abort();
	}
	fclose(fp);
}

size_t fuzz_zstd_frame(const uint8_t *src, size_t n, uint8_t *dst, size_t cap)
{
	ZSTD_CCtx *cctx = ZSTD_createCCtx();
	size_t z;

	if (!cctx || ZSTD_isError(ZSTD_CCtx_setParameter(cctx, ZSTD_c_checksumFlag, 1)))
		abort();
	z = ZSTD_compress2(cctx, dst, cap, src, n);
	ZSTD_freeCCtx(cctx);
	if (ZSTD_isError(z))
		abort();
	return z;
}

/*
 * Every imported sequence must fit the model the importer was given, and
 * its gates (with --gates) be what the trace format allows.
 */
static int check_seq(void *ctx, const struct rlb_seq *seq, struct rlb_err *err)
{
	const struct rlb_config *cfg = ctx;
	size_t i, n = (size_t)seq->tokens * cfg->model.moe_layers * cfg->model.topk;

	(void)err;
	for (i = 0; i < n; i++)
		if (seq->ids[i] >= cfg->model.experts ||
		    (seq->gates && !rlb_trace_gate_ok(seq->gates[i])))
			abort();
	return 0;
}

void fuzz_import(const uint8_t *data, size_t size, enum rlb_import_format f,
		 const char *name, int dense)
{
	struct rlb_import_opts o;
	struct rlb_config cfg;
	struct rlb_err err;

	rlb_config_defaults(&cfg);
	cfg.model.experts = 16;
	cfg.model.topk = 2;
	cfg.model.moe_layers = 4;
	/*
	 * inputs of size 4 to 7 mod 8 come from a hybrid given layer by layer
	 * (its MoE layers at 1, 4, 6, 8 of 9); of the others, those of size 2
	 * or 3 mod 4 from a model that interleaves: 9 layers
	 */
	if (size & 4) {
		snprintf(cfg.model.layer_pattern, sizeof(cfg.model.layer_pattern), "MEM*E-E*E");
	} else {
		cfg.model.first_dense_layers = dense;
		if (size & 2) {
			cfg.model.moe_layer_period = 2;
			cfg.model.moe_layer_offset = 1;
		}
	}
	memset(&o, 0, sizeof(o));
	o.format = f;
	o.step = -1;
	o.group = -1;
	/* odd-sized inputs of the formats that carry gates keep them */
	o.gates = (f == RLB_IMPORT_JSONL || f == RLB_IMPORT_SGLANG) && (size & 1);
	(void)rlb_import_to_sink(&o, fuzz_file(data, size, name), &cfg, check_seq,
				 &cfg, NULL, NULL, &err);
}

/* Every step of R as text, from the start. */
static char *plan_text(struct rlb_plan_reader *r, int check, size_t *len)
{
	struct rlb_step_plan p;
	struct rlb_err err;
	char *buf = NULL;
	FILE *fp = open_memstream(&buf, len);

	if (!fp)
		abort();
	memset(&p, 0, sizeof(p));
	if (check) {
		/* the header as inspect --json prints it (names are UTF-8) */
		json_t *j = rlb_plan_header_json(rlb_plan_reader_header(r));

		if (!j)
			abort();
		json_decref(j);
	}
	rlb_plan_reader_rewind(r);
	while (rlb_plan_reader_next(r, &p, &err) == 1) {
		if (check && rlb_step_plan_check(&p, NULL, &err) != 0) {
			fprintf(stderr, "decoded plan fails its check: %s\n", err.msg);
			abort();
		}
		if (rlb_plan_write_text(fp, NULL, &p, &err) != 0)
			abort();
		if (check) {
			/* what inspect --json --dump prints of it */
			json_t *j = rlb_step_plan_json(&p, 1);

			if (!j)
				abort();
			json_decref(j);
		}
	}
	rlb_step_plan_release(&p);
	if (fclose(fp) != 0)
		abort();
	return buf;
}

void fuzz_plan(const char *path)
{
	struct rlb_plan_reader *r, *r2;
	struct rlb_plan_writer *w;
	struct rlb_step_plan p;
	struct rlb_err err;
	char *a, *b;
	size_t alen, blen;

	if (rlb_plan_reader_open(&r, path, &err) != 0)
		return;
	a = plan_text(r, 1, &alen);
	if (snprintf(again, sizeof(again), "%s/again.rlp", dir) >= (int)sizeof(again) ||
	    rlb_plan_writer_open(&w, again, rlb_plan_reader_header(r), NULL, &err) != 0)
		abort();
	memset(&p, 0, sizeof(p));
	rlb_plan_reader_rewind(r);
	while (rlb_plan_reader_next(r, &p, &err) == 1)
		if (rlb_plan_writer_append(w, &p) != 0) {
			rlb_plan_writer_error(w, &err);
			fprintf(stderr, "a decoded step does not write again: %s\n", err.msg);
			abort();
		}
	rlb_step_plan_release(&p);
	if (rlb_plan_writer_close(w, &err) != 0 || rlb_plan_reader_open(&r2, again, &err) != 0) {
		fprintf(stderr, "the plan written again does not read: %s\n", err.msg);
		abort();
	}
	b = plan_text(r2, 0, &blen);
	if (alen != blen || memcmp(a, b, alen) != 0) {
		fprintf(stderr, "the plan written again reads otherwise:\n%s\n---\n%s\n", a, b);
		abort();
	}
	free(a);
	free(b);
	rlb_plan_reader_free(r2);
	rlb_plan_reader_free(r);
}

/* What one pass over a trace saw. */
struct pass {
	uint64_t seqs, tokens, sum;	/* sum: a hash of every id and field */
	int end;			/* the last rlb_trace_reader_next result */
	struct rlb_err err;
};

/* Read R from where it is to its end; with W, write each sequence to it. */
static void trace_pass(struct rlb_trace_reader *r, struct rlb_trace_writer *w,
		       struct pass *p)
{
	const struct rlb_trace_header *h = rlb_trace_reader_header(r);
	struct rlb_seq seq;
	struct rlb_err err;
	size_t i, k;

	memset(p, 0, sizeof(*p));
	while ((p->end = rlb_trace_reader_next(r, &seq, &p->err)) == 1) {
		k = (size_t)seq.tokens * h->moe_layers * h->topk;
		p->seqs++;
		p->tokens += seq.tokens;
		p->sum = p->sum * 31 + seq.step * 7 + seq.group * 5 + seq.sample;
		for (i = 0; i < k; i++) {
			if (seq.ids[i] >= h->experts)
				abort();
			p->sum = p->sum * 131 + seq.ids[i];
		}
		if (w && rlb_trace_writer_append(w, &seq) != 0) {
			rlb_trace_writer_error(w, &err);
			fprintf(stderr, "a sequence read does not write again: %s\n", err.msg);
			abort();
		}
	}
}

static void same_pass(const struct pass *a, const struct pass *b, int ends,
		      const char *what)
{
	if (a->seqs == b->seqs && a->tokens == b->tokens && a->sum == b->sum &&
	    (!ends || (a->end == b->end &&
		       (a->end >= 0 || strcmp(a->err.msg, b->err.msg) == 0))))
		return;
	fprintf(stderr, "%s: %llu / %llu sequences, end %d / %d: '%s' / '%s'\n", what,
		(unsigned long long)a->seqs, (unsigned long long)b->seqs, a->end, b->end,
		a->end < 0 ? a->err.msg : "", b->end < 0 ? b->err.msg : "");
	abort();
}

void fuzz_trace(const char *path)
{
	struct rlb_trace_reader *r, *r2;
	struct rlb_trace_writer *w;
	struct pass one, three, written, back;
	struct rlb_seq seq;
	struct rlb_err err;
	const uint32_t *steps;
	size_t i, n;

	if (rlb_trace_reader_open(&r, path, &err) != 0)
		return;
	trace_pass(r, NULL, &one);
	if (rlb_trace_reader_rewind(r, &err) == 0 &&
	    rlb_trace_reader_set_threads(r, 3, &err) == 0) {
		trace_pass(r, NULL, &three);
		same_pass(&one, &three, 1, "3 threads read otherwise than 1");
		(void)rlb_trace_reader_set_threads(r, 1, &err);
	}
	if (snprintf(again, sizeof(again), "%s/again.rrt", dir) >= (int)sizeof(again) ||
	    rlb_trace_writer_open(&w, again, rlb_trace_reader_header(r), NULL, &err) != 0) {
		fprintf(stderr, "a header read does not write again: %s\n", err.msg);
		abort();
	}
	if (rlb_trace_reader_rewind(r, &err) == 0) {
		trace_pass(r, w, &written);
		if (rlb_trace_writer_close(w, &err) != 0 ||
		    rlb_trace_reader_open(&r2, again, &err) != 0) {
			fprintf(stderr, "the trace written again does not read: %s\n", err.msg);
			abort();
		}
		trace_pass(r2, NULL, &back);
		if (back.end != 0) {
			fprintf(stderr, "the trace written again fails: %s\n", back.err.msg);
			abort();
		}
		same_pass(&written, &back, 0, "the trace written again reads otherwise");
		rlb_trace_reader_free(r2);
	} else {
		rlb_trace_writer_abort(w);
	}
	if (rlb_trace_reader_steps(r, &steps, &n, &err) != 0)
		n = 0;
	for (i = 0; i < n; i++)
		if (rlb_trace_reader_seek_step(r, steps[i], &err) == 0)
			(void)rlb_trace_reader_next(r, &seq, &err);
	rlb_trace_reader_free(r);
}

static char *yaml_of(const struct rlb_config *cfg, size_t *len)
{
	struct rlb_err err;
	char *buf = NULL;
	FILE *fp = open_memstream(&buf, len);

	if (!fp || rlb_config_write_yaml(cfg, fp, &err) != 0 || fclose(fp) != 0)
		abort();
	return buf;
}

void fuzz_config(const struct rlb_config *cfg)
{
	struct rlb_config back;
	struct rlb_err err;
	char *a, *b;
	size_t alen, blen;

	a = yaml_of(cfg, &alen);
	if (rlb_config_load(&back, fuzz_file((const uint8_t *)a, alen, "again.yaml"),
			    NULL, 0, &err) != 0) {
		fprintf(stderr, "written config does not load: %s\n%s\n", err.msg, a);
		abort();
	}
	b = yaml_of(&back, &blen);
	if (alen != blen || memcmp(a, b, alen) != 0) {
		fprintf(stderr, "written config loads to other values:\n%s\n---\n%s\n", a, b);
		abort();
	}
	free(a);
	free(b);
}
