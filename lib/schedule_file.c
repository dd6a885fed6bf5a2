/*
 * schedule_file.c - a trainer's own micro-batch assignment as JSON
 * ("relibra.schedule/1", docs/schedule.md): loaded and checked once, then
 * turned into each step's schedule against the trace's sequence lengths.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "schedule.h"
#include "sniff.h"
#include "util.h"

#define SCHEDULE_SCHEMA RLB_SCHEDULE_SCHEMA

struct file_step {
	uint32_t step;
	uint32_t *ranks;	/* [nmb] ranks listed by each micro-batch */
	size_t nmb;
	size_t first;		/* its chunks: chunks[first .. first + n) */
	size_t n;
};

struct rlb_schedule_file {
	char *path;
	struct file_step *steps;	/* ascending step */
	size_t nsteps;
	struct rlb_chunk *chunks;
	size_t nchunks;
	size_t chunk_cap;
};

void rlb_schedule_file_free(struct rlb_schedule_file *f)
{
	size_t i;

	if (!f)
		return;
	free(f->path);
	for (i = 0; f->steps && i < f->nsteps; i++)
		free(f->steps[i].ranks);
	free(f->steps);
	free(f->chunks);
	free(f);
}

/* A JSON integer in [0, max], or -1. */
static long long get_uint(const json_t *v, long long max)
{
	long long x;

	if (!json_is_integer(v))
		return -1;
	x = json_integer_value(v);
	return x < 0 || x > max ? -1 : x;
}

static int bad(const struct rlb_schedule_file *f, struct rlb_err *err,
	       const char *where, const char *what)
{
	return rlb_err_set(err, RLB_EPARSE, "schedule '%s': '%s': expected %s",
			   f->path, where, what);
}

/* One micro-batch: an array of ranks, each an array of [seq, start, end]. */
static int load_mb(struct rlb_schedule_file *f, const json_t *mb, size_t si,
		   size_t m, struct file_step *fs, struct rlb_err *err)
{
	char where[160];
	size_t r, k;

	snprintf(where, sizeof(where), "steps[%zu].micro_batches[%zu]", si, m);
	if (!json_is_array(mb) || json_array_size(mb) == 0 ||
	    json_array_size(mb) > UINT32_MAX)
		return bad(f, err, where, "an array of ranks");
	/* checked against the EP size by rlb_schedule_file_step */
	fs->ranks[m] = (uint32_t)json_array_size(mb);
	for (r = 0; r < json_array_size(mb); r++) {
		const json_t *rank = json_array_get(mb, r);

		snprintf(where, sizeof(where), "steps[%zu].micro_batches[%zu][%zu]",
			 si, m, r);
		if (!json_is_array(rank))
			return bad(f, err, where, "an array of [seq, start, end] token ranges");
		for (k = 0; k < json_array_size(rank); k++) {
			const json_t *c = json_array_get(rank, k);
			long long q, a, b;
			struct rlb_chunk *ch;

			snprintf(where, sizeof(where),
				 "steps[%zu].micro_batches[%zu][%zu][%zu]", si, m, r, k);
			if (!json_is_array(c) || json_array_size(c) != 3)
				return bad(f, err, where, "[seq, start, end]");
			q = get_uint(json_array_get(c, 0), UINT32_MAX);
			a = get_uint(json_array_get(c, 1), UINT32_MAX);
			b = get_uint(json_array_get(c, 2), UINT32_MAX);
			if (q < 0 || a < 0 || b < 0 || b <= a)
				return bad(f, err, where,
					   "[seq, start, end] with integers from 0 to 4294967295 and end > start");
			if (rlb_grow((void **)&f->chunks, &f->chunk_cap,
				     f->nchunks + 1, sizeof(*f->chunks)))
				return rlb_err_set(err, RLB_ENOMEM, "schedule: out of memory");
			ch = &f->chunks[f->nchunks++];
			ch->seq = (uint32_t)q;
			ch->start = (uint32_t)a;
			ch->tokens = (uint32_t)(b - a);
			ch->mb = (uint32_t)m;
			ch->rank = (uint32_t)r;
		}
	}
	return 0;
}

static int load_root(struct rlb_schedule_file *f, const json_t *root,
		     struct rlb_err *err)
{
	const json_t *schema = json_object_get(root, "schema");
	const json_t *steps = json_object_get(root, "steps");
	size_t i, m;
	int ret;

	if (!json_is_object(root))
		return bad(f, err, "(top level)", "an object");
	if (!json_is_string(schema))
		return bad(f, err, "schema", "\"" SCHEDULE_SCHEMA "\"");
	if (strcmp(json_string_value(schema), SCHEDULE_SCHEMA))
		return rlb_err_set(err, RLB_EPARSE,
				   "schedule '%s': schema '%s' is not supported (expected '%s')",
				   f->path, json_string_value(schema), SCHEDULE_SCHEMA);
	if (!json_is_array(steps))
		return bad(f, err, "steps", "an array of steps");
	f->steps = calloc(json_array_size(steps) + 1, sizeof(*f->steps));
	if (!f->steps)
		return rlb_err_set(err, RLB_ENOMEM, "schedule: out of memory");
	for (i = 0; i < json_array_size(steps); i++) {
		const json_t *st = json_array_get(steps, i);
		const json_t *mbs = json_object_get(st, "micro_batches");
		struct file_step *fs = &f->steps[i];
		char where[48];
		long long step;

		snprintf(where, sizeof(where), "steps[%zu]", i);
		if (!json_is_object(st))
			return bad(f, err, where, "an object with step and micro_batches");
		snprintf(where, sizeof(where), "steps[%zu].step", i);
		step = get_uint(json_object_get(st, "step"), UINT32_MAX);
		if (step < 0)
			return bad(f, err, where, "a step number from 0 to 4294967295");
		if (i && step <= f->steps[i - 1].step)
			return rlb_err_set(err, RLB_EPARSE,
					   "schedule '%s': '%s': steps must increase (%lld after %u)",
					   f->path, where, step, f->steps[i - 1].step);
		snprintf(where, sizeof(where), "steps[%zu].micro_batches", i);
		if (!json_is_array(mbs))
			return bad(f, err, where, "an array of micro-batches");
		if (json_array_size(mbs) > RLB_SCHEDULE_MAX_MICRO_BATCHES)
			return bad(f, err, where, "at most 2^20 micro-batches");
		fs->step = (uint32_t)step;
		fs->first = f->nchunks;
		fs->nmb = json_array_size(mbs);
		fs->ranks = malloc((fs->nmb + 1) * sizeof(*fs->ranks));
		if (!fs->ranks)
			return rlb_err_set(err, RLB_ENOMEM, "schedule: out of memory");
		f->nsteps++;	/* freed with the file from here on */
		for (m = 0; m < json_array_size(mbs); m++) {
			ret = load_mb(f, json_array_get(mbs, m), i, m, fs, err);
			if (ret < 0)
				return ret;
		}
		fs->n = f->nchunks - fs->first;
	}
	return 0;
}

int rlb_schedule_file_load(struct rlb_schedule_file **out, const char *path,
			   struct rlb_err *err)
{
	int is_stdin = strcmp(path, "-") == 0;
	struct rlb_schedule_file *f;
	json_error_t jerr;
	json_t *root = NULL;
	FILE *fp = NULL;
	int ret;

	*out = NULL;
	f = calloc(1, sizeof(*f));
	if (!f || !(f->path = strdup(path))) {
		free(f);
		return rlb_err_set(err, RLB_ENOMEM, "schedule: out of memory");
	}
	fp = is_stdin ? stdin : fopen(path, "rb");
	if (!fp) {
		ret = rlb_err_errno(err, RLB_EIO, "cannot open schedule '%s'", path);
		goto out;
	}
	root = json_loadf(fp, JSON_REJECT_DUPLICATES, &jerr);
	if (!root) {
		int line, column, byte;

		rlb_json_error_where(&jerr, &line, &column, &byte);
		if (ferror(fp))
			ret = rlb_err_errno(err, RLB_EIO, "cannot read schedule '%s'", path);
		else if ((ret = rlb_kind_err_fd(err, RLB_EPARSE, fileno(fp), 1, RLB_KIND_SCHEDULE,
						path, "a schedule (relibra.schedule/1 JSON)",
						NULL)))
			;
		else
			ret = rlb_err_set(err, RLB_EPARSE,
					  "schedule '%s': invalid JSON at line %d, column %d (byte %d): %s",
					  path, line, column, byte, jerr.text);
		goto out;
	}
	ret = load_root(f, root, err);
out:
	json_decref(root);
	if (fp && !is_stdin)
		fclose(fp);
	if (ret < 0)
		rlb_schedule_file_free(f);
	else
		*out = f;
	return ret;
}

size_t rlb_schedule_file_extra_steps(const struct rlb_schedule_file *f,
				     const uint32_t *steps, size_t n,
				     uint32_t lo, uint32_t hi, uint32_t *first)
{
	size_t i, j = 0, extra = 0;

	/* both ascending: one merge */
	for (i = 0; i < f->nsteps; i++) {
		uint32_t s = f->steps[i].step;

		if (s < lo || s > hi)
			continue;
		while (j < n && steps[j] < s)
			j++;
		if (j < n && steps[j] == s)
			continue;
		if (!extra++)
			*first = s;
	}
	return extra;
}

int rlb_schedule_file_step(const struct rlb_schedule_file *f, uint32_t step,
			   const uint32_t *seq_tokens, size_t nseqs,
			   uint32_t ranks, uint32_t mb_tokens,
			   struct rlb_schedule *s, struct rlb_err *err)
{
	const struct file_step *fs = NULL;
	size_t i;
	int ret;

	memset(s, 0, sizeof(*s));
	for (i = 0; i < f->nsteps; i++)
		if (f->steps[i].step == step)
			fs = &f->steps[i];
	if (!fs)
		return rlb_err_set(err, RLB_ENOTFOUND,
				   "schedule '%s' has no step %u", f->path, step);
	for (i = 0; i < fs->nmb; i++)
		if (fs->ranks[i] != ranks)
			return rlb_err_set(err, RLB_EMISMATCH,
					   "schedule '%s': 'steps[%zu].micro_batches[%zu]' (step %u) lists %u ranks, the EP size is %u",
					   f->path, (size_t)(fs - f->steps), i, step,
					   fs->ranks[i], ranks);
	/* A step without chunks: no pointer arithmetic on a NULL array. */
	ret = rlb_schedule_from_chunks(s, step, RLB_PACK_FILE,
				       fs->n ? f->chunks + fs->first : NULL,
				       fs->n, seq_tokens, nseqs, ranks,
				       mb_tokens, err);
	if (ret < 0) {
		/* "schedule 'F': step S: ...", not "schedule 'F': schedule: step S: ..." */
		if (err && strncmp(err->msg, "schedule: ", 10) == 0)
			memmove(err->msg, err->msg + 10, strlen(err->msg + 10) + 1);
		rlb_err_prefix(err, "schedule '%s'", f->path);
	}
	return ret;
}

json_t *rlb_schedule_step_json(const struct rlb_schedule *s)
{
	json_t *mbs = json_array(), *j;
	size_t c;
	uint32_t m, r;

	if (!mbs)
		return NULL;
	for (m = 0; m < s->micro_batches; m++) {
		json_t *mb = json_array();

		if (!mb || json_array_append_new(mbs, mb))
			goto fail;
		for (r = 0; r < s->ranks; r++)
			if (json_array_append_new(mb, json_array()))
				goto fail;
	}
	for (c = 0; c < s->nchunks; c++) {
		const struct rlb_chunk *ch = &s->chunks[c];
		json_t *rank = json_array_get(json_array_get(mbs, ch->mb), ch->rank);

		if (!rank || json_array_append_new(rank,
				json_pack("[I, I, I]", (json_int_t)ch->seq,
					  (json_int_t)ch->start,
					  (json_int_t)ch->start + ch->tokens)))
			goto fail;
	}
	j = json_pack("{s:I, s:o}", "step", (json_int_t)s->step, "micro_batches", mbs);
	return j;
fail:
	json_decref(mbs);
	return NULL;
}
