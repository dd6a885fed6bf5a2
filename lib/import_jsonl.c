/*
 * import_jsonl.c - relibra's simple JSON lines format for any other
 * source: one object per sequence with token-major "experts" (and
 * optional "gates").  Specified in docs/jsonl-format.md.
 */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "import_internal.h"

/*
 * Doubles from here up round to float32 infinity (FLT_MAX plus half its
 * ulp, a tie that rounds to even: up); below, the float is finite.
 */
#define GATE_F32_LIMIT 0x1.ffffffp+127

struct jl_state {
	uint16_t *ids;
	float *gates;
	size_t cap, gcap;		/* values in ids, in gates */
};

/* Check "gates" (or "experts") has the routing's shape on MoE layers. */
static int jl_row(json_t *row, const char *what, size_t t, size_t l, uint32_t K,
		  struct rlb_err *err)
{
	if (!json_is_array(row))
		return rlb_err_set(err, RLB_EPARSE, "%s[%zu][%zu]: expected an array",
				   what, t, l);
	if (json_array_size(row) != K)
		return rlb_err_set(err, RLB_EMISMATCH,
				   "%s[%zu][%zu]: %zu values, expected topk %" PRIu32,
				   what, t, l, json_array_size(row), K);
	return 0;
}

/*
 * Check every token's layers and every MoE row of "experts" (and "gates")
 * before the buffers are sized from T: a long array of junk tokens must
 * not make an allocation of T x moe_layers x topk.
 */
static int jl_shape(json_t *ex, json_t *ga, size_t T, size_t Lin,
		    const struct rlb_layer_map *map, uint32_t L, uint32_t K,
		    struct rlb_err *err)
{
	size_t t, l, j;
	int ret;

	for (t = 0; t < T; t++) {
		json_t *tok = json_array_get(ex, t), *gtok = ga ? json_array_get(ga, t) : NULL;

		if (!json_is_array(tok))
			return rlb_err_set(err, RLB_EPARSE,
					   "experts[%zu]: expected an array of layers", t);
		if (json_array_size(tok) != Lin)
			return rlb_err_set(err, RLB_EMISMATCH,
					   "experts[%zu]: %zu layers, expected %zu as in experts[0]",
					   t, json_array_size(tok), Lin);
		if (ga && (!json_is_array(gtok) || json_array_size(gtok) != Lin))
			return rlb_err_set(err, RLB_EMISMATCH,
					   "gates[%zu]: expected an array of %zu layers like experts",
					   t, Lin);
		for (j = 0; j < L; j++) {
			l = rlb_layer_map_at(map, j);
			ret = jl_row(json_array_get(tok, l), "experts", t, l, K, err);
			if (ret == 0 && ga)
				ret = jl_row(json_array_get(gtok, l), "gates", t, l, K, err);
			if (ret != 0)
				return ret;
		}
	}
	return 0;
}

static int jl_record(struct rlb_importer *im, struct jl_state *s, json_t *rec,
		     struct rlb_err *err)
{
	struct rlb_import_ids in = { -1, -1, -1 };
	uint32_t K = im->topk, L = im->moe_layers, step;
	struct rlb_layer_map map;
	json_t *ex, *ga = NULL;
	size_t T, Lin = 0, t, l, j, k, n;
	int ret;

	if (!json_is_object(rec))
		return rlb_err_set(err, RLB_EPARSE, "expected a JSON object");
	if ((ret = rlb_json_opt_uint(rec, "step", "step", UINT32_MAX, &in.step, err)) ||
	    (ret = rlb_json_opt_uint(rec, "group", "group", UINT32_MAX, &in.group, err)) ||
	    (ret = rlb_json_opt_uint(rec, "sample", "sample", UINT32_MAX, &in.sample, err)))
		return ret;
	ex = json_object_get(rec, "experts");
	if (!ex)
		return rlb_err_set(err, RLB_EPARSE, "experts: missing");
	if (!json_is_array(ex))
		return rlb_err_set(err, RLB_EPARSE, "experts: expected an array of tokens");
	T = json_array_size(ex);
	if (T > RLB_TRACE_MAX_SEQ_TOKENS)
		return rlb_err_set(err, RLB_ERANGE, "experts: %zu tokens is above the limit of %u",
				   T, RLB_TRACE_MAX_SEQ_TOKENS);
	if (im->gates) {
		ga = json_object_get(rec, "gates");
		if (!ga)
			return rlb_err_set(err, RLB_EPARSE,
					   "gates: missing (--gates needs gate weights in every record)");
		if (!json_is_array(ga) || json_array_size(ga) != T)
			return rlb_err_set(err, RLB_EMISMATCH,
					   "gates: expected an array of %zu tokens like experts", T);
	}
	ret = rlb_importer_step(im, in.step, &step, err);
	if (ret != 0)
		return ret;
	if (T == 0)
		return 0;
	if (!json_is_array(json_array_get(ex, 0)))
		return rlb_err_set(err, RLB_EPARSE, "experts[0]: expected an array of layers");
	Lin = json_array_size(json_array_get(ex, 0));
	ret = rlb_importer_layer_map(im, Lin, &map, err);
	if (ret != 0) {
		rlb_err_prefix(err, "experts[0]");
		return ret;
	}
	ret = jl_shape(ex, ga, T, Lin, &map, L, K, err);
	if (ret != 0)
		return ret;
	n = T * L * K;
	if (n > s->cap) {
		free(s->ids);
		s->ids = malloc(n * sizeof(*s->ids));
		s->cap = s->ids ? n : 0;
		if (!s->cap)
			return rlb_err_set(err, RLB_ENOMEM, "out of memory");
	}
	if (ga && n > s->gcap) {
		free(s->gates);
		s->gates = malloc(n * sizeof(*s->gates));
		s->gcap = s->gates ? n : 0;
		if (!s->gcap)
			return rlb_err_set(err, RLB_ENOMEM, "out of memory");
	}
	for (t = 0; t < T; t++) {
		json_t *tok = json_array_get(ex, t), *gtok = ga ? json_array_get(ga, t) : NULL;

		for (j = 0; j < L; j++) {
			size_t base = (j * T + t) * K;
			json_t *row, *grow;

			l = rlb_layer_map_at(&map, j);
			row = json_array_get(tok, l);
			grow = ga ? json_array_get(gtok, l) : NULL;

			for (k = 0; k < K; k++) {
				json_t *v = json_array_get(row, k);
				json_int_t id;

				if (!json_is_integer(v))
					return rlb_err_set(err, RLB_EPARSE,
							   "experts[%zu][%zu][%zu]: expected an integer",
							   t, l, k);
				id = json_integer_value(v);
				if (id < 0 || id >= (json_int_t)im->experts)
					return rlb_err_set(err, RLB_ERANGE,
							   "experts[%zu][%zu][%zu]: value %" JSON_INTEGER_FORMAT
							   " is not an expert id in [0, %" PRIu32 ")",
							   t, l, k, id, im->experts);
				s->ids[base + k] = (uint16_t)id;
				if (ga) {
					json_t *g = json_array_get(grow, k);
					double gv;

					if (!json_is_number(g))
						return rlb_err_set(err, RLB_EPARSE,
								   "gates[%zu][%zu][%zu]: expected a number",
								   t, l, k);
					gv = json_number_value(g);
					if (!(gv >= 0 && gv < GATE_F32_LIMIT))
						return rlb_err_set(err, RLB_ERANGE,
								   "gates[%zu][%zu][%zu]: value %.9g is not a finite non-negative float32",
								   t, l, k, gv);
					s->gates[base + k] = (float)gv;
				}
			}
		}
	}
	return rlb_importer_emit(im, step, &in, (uint32_t)T, s->ids,
				 ga ? s->gates : NULL, err);
}

int rlb_import_jsonl(struct rlb_importer *im, FILE *fp, struct rlb_err *err)
{
	struct rlb_line_reader r;
	struct jl_state s;
	json_t *doc = NULL;
	int ret = 0;

	memset(&r, 0, sizeof(r));
	memset(&s, 0, sizeof(s));
	r.fp = fp;
	r.name = im->name;
	for (;;) {
		ret = rlb_line_next(&r, err);
		if (ret <= 0)
			break;
		ret = rlb_line_json(&r, &doc, err);
		if (ret != 0)
			break;
		im->records++;
		ret = jl_record(im, &s, doc, err);
		json_decref(doc);
		if (ret != 0) {
			rlb_err_prefix(err, "%s:%" PRIu64, im->name, r.lineno);
			break;
		}
		if (im->progress)
			im->progress(im->progress_ctx, im->records, 0, "records");
	}
	free(s.ids);
	free(s.gates);
	rlb_line_release(&r);
	return ret;
}
