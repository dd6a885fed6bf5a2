/*
 * import_megatron.c - Megatron-LM router traces (--moe-routing-trace-path):
 * JSON lines, one record per (step, stage, block, layer, rank) with that
 * forward pass's top_indices.  There are no sequence boundaries: the
 * records of one (step, stage, block, rank) are joined across MoE layers
 * into one sequence (one rank's tokens of one forward pass), emitted as
 * soon as every MoE layer has arrived.  A directory of per-rank files is
 * merged by step.  A record that repeats, layer for layer, the routing
 * of a sequence already written in its step is the router firing again
 * in activation recompute and is dropped.  Rules: docs/jsonl-format.md.
 */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "import_internal.h"
#include "util.h"

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

/* A sequence written in the current step, kept to recognise a recompute. */
struct mg_written {
	char *stage, *block;
	int64_t rank;
	uint32_t tokens;
	uint64_t *hash;			/* [moe_layers]: each layer's ids */
	uint8_t *repeated;		/* [moe_layers]: its repeat was dropped */
};

struct mg_state {
	struct rlb_importer *im;
	struct mg_pending *pend;
	size_t npend, cap;
	struct mg_written *done;
	size_t ndone, done_cap;
	int64_t done_step;		/* the step of the written sequences */
	uint16_t *row;			/* the record's ids [tokens][topk] */
	size_t row_cap;
	/* layer numbering: MoE layer j is layer base + j * stride */
	enum { NUM_UNDECIDED, NUM_AMBIGUOUS, NUM_DECIDED } numbering;
	int64_t base, stride;
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

static void written_clear(struct mg_state *s)
{
	size_t i;

	for (i = 0; i < s->ndone; i++) {
		free(s->done[i].stage);
		free(s->done[i].block);
		free(s->done[i].hash);
		free(s->done[i].repeated);
	}
	s->ndone = 0;
}

static uint64_t ids_hash(const uint16_t *ids, size_t n)
{
	return rlb_fnv1a(RLB_FNV1A_INIT, ids, n * sizeof(*ids));
}

/*
 * Keep the written sequence p's key and per-layer hashes, taking its
 * stage and block strings.  Returns 0 or RLB_ENOMEM.
 */
static int written_add(struct mg_state *s, struct mg_pending *p, struct rlb_err *err)
{
	uint32_t L = s->im->moe_layers, K = s->im->topk, l;
	size_t per = (size_t)p->tokens * K;
	struct mg_written *w;

	if (rlb_grow(&s->done, &s->done_cap, s->ndone + 1, sizeof(*s->done)))
		return rlb_err_set(err, RLB_ENOMEM, "out of memory");
	w = &s->done[s->ndone];
	w->hash = malloc(L * sizeof(*w->hash));
	w->repeated = calloc(L, 1);
	if (!w->hash || !w->repeated) {
		free(w->hash);
		free(w->repeated);
		return rlb_err_set(err, RLB_ENOMEM, "out of memory");
	}
	for (l = 0; l < L; l++)
		w->hash[l] = ids_hash(p->ids + l * per, per);
	w->stage = p->stage;
	w->block = p->block;
	p->stage = p->block = NULL;
	w->rank = p->rank;
	w->tokens = p->tokens;
	s->ndone++;
	return 0;
}

/*
 * Whether layer ml's ids repeat, unrepeated so far, those of a sequence
 * with the same key written in this step: activation recompute runs the
 * router again in the backward pass.  Marks the layer repeated.
 */
static int recomputed(struct mg_state *s, int64_t rank, const char *stage,
		      const char *block, uint32_t ml, uint32_t tokens, uint64_t h)
{
	size_t i;

	for (i = 0; i < s->ndone; i++) {
		struct mg_written *w = &s->done[i];

		if (w->rank == rank && w->tokens == tokens && !w->repeated[ml] &&
		    w->hash[ml] == h && strcmp(w->stage, stage) == 0 &&
		    strcmp(w->block, block) == 0) {
			w->repeated[ml] = 1;
			return 1;
		}
	}
	return 0;
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

/* The record's top_indices into s->row: [tokens][topk] ids, checked. */
static int read_rows(struct mg_state *s, json_t *ti, uint32_t tokens,
		     struct rlb_err *err)
{
	uint32_t K = s->im->topk, t, k;
	size_t need = (size_t)tokens * K;

	if (json_array_size(ti) != tokens)
		return rlb_err_set(err, RLB_EMISMATCH,
				   "top_indices: %zu tokens, num_tokens is %" PRIu32,
				   json_array_size(ti), tokens);
	if (rlb_grow(&s->row, &s->row_cap, need, sizeof(*s->row)))
		return rlb_err_set(err, RLB_ENOMEM, "out of memory");
	for (t = 0; t < tokens; t++) {
		json_t *row = json_array_get(ti, t);

		if (!json_is_array(row) || json_array_size(row) != K)
			return rlb_err_set(err, RLB_EMISMATCH,
					   "top_indices[%" PRIu32 "]: expected an array of topk %"
					   PRIu32 " ids", t, K);
		for (k = 0; k < K; k++) {
			json_t *v = json_array_get(row, k);
			json_int_t id;

			if (!json_is_integer(v))
				return rlb_err_set(err, RLB_EPARSE,
						   "top_indices[%" PRIu32 "][%" PRIu32
						   "]: expected an integer", t, k);
			id = json_integer_value(v);
			if (id < 0 || id >= (json_int_t)s->im->experts)
				return rlb_err_set(err, RLB_ERANGE,
						   "top_indices[%" PRIu32 "][%" PRIu32 "]: value %"
						   JSON_INTEGER_FORMAT " is not an expert id in [0, %"
						   PRIu32 ")", t, k, id, s->im->experts);
			s->row[(size_t)t * K + k] = (uint16_t)id;
		}
	}
	return 0;
}

/* The pending sequence of (step, rank, stage, block), or a new one. */
static int pending_get(struct mg_state *s, int64_t step, uint32_t out_step,
		       int64_t rank, char **stage, char **block, uint32_t tokens,
		       struct mg_pending **out, struct rlb_err *err)
{
	uint32_t L = s->im->moe_layers;
	struct mg_pending *p;
	size_t i;

	for (i = 0; i < s->npend; i++) {
		p = &s->pend[i];
		if (p->step == step && p->rank == rank && strcmp(p->stage, *stage) == 0 &&
		    strcmp(p->block, *block) == 0) {
			*out = p;
			return 0;
		}
	}
	if (rlb_grow(&s->pend, &s->cap, s->npend + 1, sizeof(*s->pend)))
		return rlb_err_set(err, RLB_ENOMEM, "out of memory");
	p = &s->pend[s->npend];
	memset(p, 0, sizeof(*p));
	p->have = calloc(L, 1);
	p->ids = malloc((size_t)L * tokens * s->im->topk * sizeof(*p->ids) + 1);
	if (!p->have || !p->ids) {
		pending_free(p);
		return rlb_err_set(err, RLB_ENOMEM, "out of memory");
	}
	p->step = step;
	p->out_step = out_step;
	p->rank = rank;
	p->tokens = tokens;
	p->stage = *stage;
	p->block = *block;
	*stage = *block = NULL;
	s->npend++;
	*out = p;
	return 0;
}

/*
 * The MoE layer of a record's layer number.  The first record decides the
 * numbering: MoE-layer indices (0), decoder.layers.N (the first MoE
 * layer's index among all layers) or layer_number (the same from 1).
 * When the first two coincide (no dense layer before the first MoE layer
 * of an interleaved model), the first other layer decides: P, 2P, ...
 * (the period) are decoder layers, anything else MoE-layer indices.
 */
/*
 * The same for a layer pattern: the first record's layer is 0 (MoE-layer
 * numbering), the first 'E' (numbering the pattern's layers from 0) or
 * one more (from 1); when the first 'E' is layer 0, the first layer
 * whose two readings differ decides: an 'E' of the pattern reads as its
 * MoE layer, anything else as a MoE-layer index.
 */
static int mg_pattern_layer(struct mg_state *s, int64_t layer, uint32_t *ml,
			    struct rlb_err *err)
{
	const struct rlb_importer *im = s->im;
	const struct rlb_model_config *m = &im->cfg->model;
	int64_t first = im->first_moe, L = im->moe_layers, j;

	if (s->numbering == NUM_UNDECIDED) {
		s->numbering = NUM_DECIDED;
		s->stride = 0;			/* 0: MoE-layer indices */
		if (layer == 0 && first == 0)
			s->numbering = NUM_AMBIGUOUS;
		else if (layer == first || layer == first + 1) {
			s->stride = 1;			/* the pattern's numbering */
			s->base = layer - first;
		} else if (layer != 0)
			return rlb_err_set(err, RLB_EINVAL,
					   "layer: %" PRId64 " in the first record is neither 0 "
					   "(MoE-layer numbering), %" PRId64 " (the first MoE layer of "
					   "model.layer_pattern) nor %" PRId64 " (the same from 1)",
					   layer, first, first + 1);
	} else if (s->numbering == NUM_AMBIGUOUS &&
		   rlb_model_moe_layer_of(m, layer) != layer) {
		s->numbering = NUM_DECIDED;
		s->stride = rlb_model_moe_layer_of(m, layer) >= 0;
		s->base = 0;
	}
	if (s->stride == 0 || s->numbering == NUM_AMBIGUOUS) {
		if (layer < 0 || layer >= L)
			return rlb_err_set(err, RLB_ERANGE,
					   "layer: %" PRId64 " is outside the MoE layers [0, %" PRId64 ")",
					   layer, L);
		*ml = (uint32_t)layer;
		return 0;
	}
	j = rlb_model_moe_layer_of(m, layer - s->base);
	if (j < 0)
		return rlb_err_set(err, RLB_ERANGE,
				   "layer: %" PRId64 " is not a MoE layer ('E') of model.layer_pattern "
				   "(numbered from %" PRId64 ")", layer, s->base);
	*ml = (uint32_t)j;
	return 0;
}

static int mg_moe_layer(struct mg_state *s, int64_t layer, uint32_t *ml,
			struct rlb_err *err)
{
	const struct rlb_importer *im = s->im;
	int64_t first = im->first_moe, period = im->period, L = im->moe_layers, rel;

	if (im->pattern)
		return mg_pattern_layer(s, layer, ml, err);

	if (s->numbering == NUM_UNDECIDED) {
		s->numbering = NUM_DECIDED;
		s->stride = period;
		if (layer == 0 && first == 0 && period > 1)
			s->numbering = NUM_AMBIGUOUS;
		else if (layer == 0)
			s->stride = 1;
		else if (layer != first && layer != first + 1)
			return rlb_err_set(err, RLB_EINVAL,
					   "layer: %" PRId64 " in the first record is neither 0 "
					   "(MoE-layer numbering), %" PRId64 " (decoder-layer numbering "
					   "after %" PRId64 " dense layers) nor %" PRId64
					   " (the same from 1)",
					   layer, first, first, first + 1);
		s->base = layer;
	} else if (s->numbering == NUM_AMBIGUOUS && layer != 0) {
		s->numbering = NUM_DECIDED;
		s->stride = layer % period == 0 && layer / period < L ? period : 1;
	}
	rel = layer - s->base;
	if (s->stride == 1 && (rel < 0 || rel >= L))
		return rlb_err_set(err, RLB_ERANGE,
				   "layer: %" PRId64 " is outside the MoE layers [%" PRId64
				   ", %" PRId64 ")", layer, s->base, s->base + L);
	if (rel < 0 || rel % s->stride || rel / s->stride >= L)
		return rlb_err_set(err, RLB_ERANGE,
				   "layer: %" PRId64 " is not one of the MoE layers %" PRId64
				   ", %" PRId64 ", ... %" PRId64 " (model.moe_layer_period %" PRId64 ")",
				   layer, s->base, s->base + s->stride,
				   s->base + (L - 1) * s->stride, s->stride);
	*ml = (uint32_t)(rel / s->stride);
	return 0;
}

static int mg_record(struct mg_state *s, json_t *rec, struct rlb_err *err)
{
	struct rlb_importer *im = s->im;
	int64_t step, layer, rank, ntok, topk;
	uint32_t K = im->topk, L = im->moe_layers, out_step, ml = 0;
	char *stage = NULL, *block = NULL;
	struct mg_pending *p = NULL;
	size_t per;
	json_t *ti, *bl;
	uint64_t h;
	size_t i;
	int ret;

	if (!json_is_object(rec))
		return rlb_err_set(err, RLB_EPARSE, "expected a JSON object");
	bl = json_object_get(rec, "block");
	if (json_object_get(rec, "mtp_idx") ||
	    (json_is_string(bl) && strcmp(json_string_value(bl), "mtp") == 0))
		return 0;	/* multi-token-prediction layers are not the model's */
	if ((ret = req_int(rec, "step", UINT32_MAX, &step, err)) ||
	    (ret = req_int(rec, "layer", RLB_TRACE_MAX_LAYERS * (RLB_MAX_MOE_LAYER_PERIOD + 1),
			    &layer, err)) ||
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
	if (step != s->done_step) {
		written_clear(s);
		s->done_step = step;
	}
	ret = mg_moe_layer(s, layer, &ml, err);
	if (ret != 0)
		return ret;
	if ((uint64_t)topk != K)
		return rlb_err_set(err, RLB_EMISMATCH, "topk: %" PRId64 ", the config has %" PRIu32,
				   topk, K);
	ti = json_object_get(rec, "top_indices");
	if (!json_is_array(ti))
		return rlb_err_set(err, RLB_EPARSE, "top_indices: %s",
				   ti ? "expected an array of tokens" : "missing");
	ret = read_rows(s, ti, (uint32_t)ntok, err);
	if (ret != 0)
		return ret;
	per = (size_t)ntok * K;
	h = ids_hash(s->row, per);
	stage = scalar_key(json_object_get(rec, "stage"));
	block = scalar_key(bl);
	if (!stage || !block) {
		ret = rlb_err_set(err, RLB_ENOMEM, "out of memory");
		goto out;
	}
	if (!im->opts->keep_repeats &&
	    recomputed(s, rank, stage, block, ml, (uint32_t)ntok, h)) {
		im->recomputed++;
		goto out;
	}
	ret = pending_get(s, step, out_step, rank, &stage, &block, (uint32_t)ntok, &p, err);
	if (ret != 0)
		goto out;
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
	if (per)
		memcpy(p->ids + (size_t)ml * per, s->row, per * sizeof(*s->row));
	p->have[ml] = 1;
	p->nlayers++;
	if (p->nlayers == L) {
		struct rlb_import_ids in = { p->step, -1, -1 };

		ret = rlb_importer_emit(im, p->out_step, &in, p->tokens, p->ids, NULL, err);
		if (ret == 0)
			ret = written_add(s, p, err);
		pending_remove(s, (size_t)(p - s->pend));
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
	written_clear(&s);
	free(s.done);
	free(s.row);
	for (i = 0; i < nfiles; i++) {
		json_decref(in[i].doc);
		rlb_line_release(&in[i].r);
	}
	free(in);
	return ret;
}
