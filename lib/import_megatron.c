/*
 * import_megatron.c - Megatron-LM router traces (--moe-routing-trace-path):
 * JSON lines, one record per (step, stage, block, layer, rank) with that
 * forward pass's top_indices.  There are no sequence boundaries: the
 * records of one (step, stage, block, rank) are joined across MoE layers
 * into one sequence (one rank's tokens of one forward pass), emitted as
 * soon as every MoE layer has arrived.  A directory of per-rank files is
 * merged by step.  Rules: docs/jsonl-format.md.
 */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "import_internal.h"

struct mg_pending {
	int64_t step;			/* the record's own step */
	uint32_t out_step;		/* the step it is written with */
	char *stage, *block;		/* compact JSON of the fields */
	int64_t rank;
	uint32_t tokens;
	uint32_t nlayers;		/* layers received */
	uint8_t *have;			/* [moe_layers] */
	uint16_t *ids;			/* layer-major [moe_layers][tokens][topk] */
};

struct mg_state {
	struct rlb_importer *im;
	struct mg_pending *pend;
	size_t npend, cap;
	int numbering;			/* 0: undecided, else 1 + layer offset */
};

static void pending_free(struct mg_pending *p)
{
	free(p->stage);
	free(p->block);
	free(p->have);
	free(p->ids);
}

static void pending_remove(struct mg_state *s, size_t i)
{
	pending_free(&s->pend[i]);
	memmove(s->pend + i, s->pend + i + 1, (s->npend - i - 1) * sizeof(*s->pend));
	s->npend--;
}

/* "step 3, rank 1 (stage "x", block "decoder")" */
static void describe(const struct mg_pending *p, char *buf, size_t cap)
{
	snprintf(buf, cap, "step %" PRId64 ", rank %" PRId64 " (stage %s, block %s)",
		 p->step, p->rank, p->stage, p->block);
}

static int incomplete(const struct mg_state *s, const struct mg_pending *p,
		      const char *when, struct rlb_err *err)
{
	char who[256], missing[160];
	size_t n = 0, shown = 0;
	uint32_t l;

	describe(p, who, sizeof(who));
	missing[0] = '\0';
	for (l = 0; l < s->im->moe_layers; l++) {
		if (p->have[l])
			continue;
		if (shown < 8)
			n += (size_t)snprintf(missing + n, sizeof(missing) - n, "%s%" PRIu32,
					      shown ? ", " : "", l);
		else if (shown == 8)
			n += (size_t)snprintf(missing + n, sizeof(missing) - n, ", ...");
		shown++;
		if (n >= sizeof(missing))
			break;
	}
	return rlb_err_set(err, RLB_EMISMATCH,
			   "sequence of %s lacks MoE layer%s %s %s", who,
			   shown > 1 ? "s" : "", missing, when);
}

static char *scalar_key(json_t *v)
{
	if (!v)
		return strdup("null");
	return json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT);
}

static int req_int(json_t *rec, const char *key, int64_t max, int64_t *out,
		   struct rlb_err *err)
{
	json_t *v = json_object_get(rec, key);

	if (!v)
		return rlb_err_set(err, RLB_EPARSE, "%s: missing", key);
	return rlb_json_opt_uint(rec, key, key, max, out, err);
}

static int mg_record(struct mg_state *s, json_t *rec, struct rlb_err *err)
{
	struct rlb_importer *im = s->im;
	int64_t step, layer, rank, ntok, topk;
	uint32_t K = im->topk, L = im->moe_layers, out_step, ml;
	char *stage = NULL, *block = NULL;
	struct mg_pending *p = NULL;
	json_t *ti, *bl;
	size_t i, t, k;
	int ret;

	if (!json_is_object(rec))
		return rlb_err_set(err, RLB_EPARSE, "expected a JSON object");
	bl = json_object_get(rec, "block");
	if (json_object_get(rec, "mtp_idx") ||
	    (json_is_string(bl) && strcmp(json_string_value(bl), "mtp") == 0))
		return 0;	/* multi-token-prediction layers are not the model's */
	if ((ret = req_int(rec, "step", UINT32_MAX, &step, err)) ||
	    (ret = req_int(rec, "layer", RLB_TRACE_MAX_LAYERS * 2, &layer, err)) ||
	    (ret = req_int(rec, "num_tokens", RLB_TRACE_MAX_SEQ_TOKENS, &ntok, err)) ||
	    (ret = req_int(rec, "topk", RLB_TRACE_MAX_TOPK, &topk, err)) ||
	    (ret = rlb_json_opt_uint(rec, "rank", "rank", INT32_MAX, &rank, err)))
		return ret;
	if (rank < 0)
		rank = 0;
	ret = rlb_importer_step(im, step, &out_step, err);
	if (ret != 0)
		return ret;
	/* A later step closes the sequences of the earlier ones. */
	for (i = 0; i < s->npend; i++) {
		if (s->pend[i].step < step) {
			char when[64];

			snprintf(when, sizeof(when), "when step %" PRId64 " begins", step);
			return incomplete(s, &s->pend[i], when, err);
		}
	}
	if (!s->numbering) {
		if (im->dense_layers == 0 || layer == 0)
			s->numbering = 1;
		else if (layer == im->dense_layers)
			s->numbering = 1 + (int)im->dense_layers;
		else
			return rlb_err_set(err, RLB_EINVAL,
					   "layer: %" PRId64 " in the first record is neither 0 "
					   "(MoE-layer numbering) nor %" PRIu32
					   " (decoder-layer numbering after %" PRIu32 " dense layers)",
					   layer, im->dense_layers, im->dense_layers);
	}
	if (layer < s->numbering - 1 || layer - (s->numbering - 1) >= (int64_t)L)
		return rlb_err_set(err, RLB_ERANGE,
				   "layer: %" PRId64 " is outside the MoE layers [%d, %" PRId64 ")",
				   layer, s->numbering - 1, (int64_t)(s->numbering - 1) + L);
	ml = (uint32_t)(layer - (s->numbering - 1));
	if ((uint64_t)topk != K)
		return rlb_err_set(err, RLB_EMISMATCH, "topk: %" PRId64 ", the config has %" PRIu32,
				   topk, K);
	ti = json_object_get(rec, "top_indices");
	if (!json_is_array(ti))
		return rlb_err_set(err, RLB_EPARSE, "top_indices: %s",
				   ti ? "expected an array of tokens" : "missing");
	if (json_array_size(ti) != (size_t)ntok)
		return rlb_err_set(err, RLB_EMISMATCH,
				   "top_indices: %zu tokens, num_tokens is %" PRId64,
				   json_array_size(ti), ntok);
	/* Rows first: a new sequence below is sized for all its layers. */
	for (t = 0; t < (size_t)ntok; t++) {
		json_t *row = json_array_get(ti, t);

		if (!json_is_array(row) || json_array_size(row) != K)
			return rlb_err_set(err, RLB_EMISMATCH,
					   "top_indices[%zu]: expected an array of topk %" PRIu32 " ids",
					   t, K);
	}
	stage = scalar_key(json_object_get(rec, "stage"));
	block = scalar_key(bl);
	if (!stage || !block) {
		ret = rlb_err_set(err, RLB_ENOMEM, "out of memory");
		goto out;
	}
	for (i = 0; i < s->npend; i++) {
		p = &s->pend[i];
		if (p->step == step && p->rank == rank && strcmp(p->stage, stage) == 0 &&
		    strcmp(p->block, block) == 0)
			break;
	}
	if (i < s->npend) {
		if (p->have[ml]) {
			char when[64];

			snprintf(when, sizeof(when), "when its layer %" PRId64 " repeats", layer);
			ret = incomplete(s, p, when, err);
			goto out;
		}
		if (p->tokens != (uint32_t)ntok) {
			ret = rlb_err_set(err, RLB_EMISMATCH,
					  "num_tokens: %" PRId64 ", earlier layers of this sequence have %" PRIu32,
					  ntok, p->tokens);
			goto out;
		}
	} else {
		if (s->npend == s->cap) {
			size_t cap = s->cap ? s->cap * 2 : 8;
			struct mg_pending *np = realloc(s->pend, cap * sizeof(*np));

			if (!np) {
				ret = rlb_err_set(err, RLB_ENOMEM, "out of memory");
				goto out;
			}
			s->pend = np;
			s->cap = cap;
		}
		p = &s->pend[s->npend];
		memset(p, 0, sizeof(*p));
		p->have = calloc(L, 1);
		p->ids = malloc((size_t)L * (size_t)ntok * K * sizeof(*p->ids) + 1);
		if (!p->have || !p->ids) {
			pending_free(p);
			ret = rlb_err_set(err, RLB_ENOMEM, "out of memory");
			goto out;
		}
		p->step = step;
		p->out_step = out_step;
		p->rank = rank;
		p->tokens = (uint32_t)ntok;
		p->stage = stage;
		p->block = block;
		stage = block = NULL;
		s->npend++;
	}
	for (t = 0; t < (size_t)ntok; t++) {
		json_t *row = json_array_get(ti, t);

		for (k = 0; k < K; k++) {
			json_t *v = json_array_get(row, k);
			json_int_t id;

			if (!json_is_integer(v)) {
				ret = rlb_err_set(err, RLB_EPARSE,
						  "top_indices[%zu][%zu]: expected an integer", t, k);
				goto out;
			}
			id = json_integer_value(v);
			if (id < 0 || id >= (json_int_t)im->experts) {
				ret = rlb_err_set(err, RLB_ERANGE,
						  "top_indices[%zu][%zu]: value %" JSON_INTEGER_FORMAT
						  " is not an expert id in [0, %" PRIu32 ")",
						  t, k, id, im->experts);
				goto out;
			}
			p->ids[((size_t)ml * p->tokens + t) * K + k] = (uint16_t)id;
		}
	}
	p->have[ml] = 1;
	p->nlayers++;
	if (p->nlayers == L) {
		struct rlb_import_ids in = { p->step, -1, -1 };

		i = (size_t)(p - s->pend);
		ret = rlb_importer_emit(im, p->out_step, &in, p->tokens, p->ids, NULL, err);
		pending_remove(s, i);
	}
out:
	free(stage);
	free(block);
	return ret;
}

struct mg_input {
	struct rlb_line_reader r;
	json_t *doc;			/* the next record, parsed */
	int64_t step;			/* its step, for the merge (-1: not an integer) */
	int eof;
};

int rlb_import_megatron(struct rlb_importer *im, FILE **fps, const char **names,
			size_t nfiles, struct rlb_err *err)
{
	struct mg_input *in;
	struct mg_state s;
	size_t i;
	int ret = 0;

	if (im->gates)
		return rlb_err_set(err, RLB_EUNSUPPORTED,
				   "megatron router traces carry no gate weights (drop --gates)");
	in = calloc(nfiles, sizeof(*in));
	if (!in)
		return rlb_err_set(err, RLB_ENOMEM, "out of memory");
	memset(&s, 0, sizeof(s));
	s.im = im;
	for (i = 0; i < nfiles; i++) {
		in[i].r.fp = fps[i];
		in[i].r.name = names[i];
	}
	for (;;) {
		size_t best = nfiles;

		/* One parsed record ahead per file; take the lowest step. */
		for (i = 0; i < nfiles; i++) {
			json_t *st;

			if (!in[i].doc && !in[i].eof) {
				ret = rlb_line_next(&in[i].r, err);
				if (ret < 0)
					goto out;
				if (ret == 0) {
					in[i].eof = 1;
					continue;
				}
				ret = rlb_line_json(&in[i].r, &in[i].doc, err);
				if (ret != 0)
					goto out;
				st = json_is_object(in[i].doc) ? json_object_get(in[i].doc, "step") : NULL;
				in[i].step = json_is_integer(st) ? json_integer_value(st) : -1;
			}
			if (in[i].doc && (best == nfiles || in[i].step < in[best].step))
				best = i;
		}
		if (best == nfiles)
			break;
		im->records++;
		ret = mg_record(&s, in[best].doc, err);
		json_decref(in[best].doc);
		in[best].doc = NULL;
		if (ret != 0) {
			rlb_err_prefix(err, "%s:%" PRIu64, in[best].r.name, in[best].r.lineno);
			goto out;
		}
		if (im->progress)
			im->progress(im->progress_ctx, im->records, 0, "records");
	}
	if (s.npend > 0) {
		ret = incomplete(&s, &s.pend[0], "at the end of the input", err);
		rlb_err_prefix(err, "%s", nfiles == 1 ? names[0] : im->name);
	}
out:
	for (i = 0; i < s.npend; i++)
		pending_free(&s.pend[i]);
	free(s.pend);
	for (i = 0; i < nfiles; i++) {
		json_decref(in[i].doc);
		rlb_line_release(&in[i].r);
	}
	free(in);
	return ret;
}
