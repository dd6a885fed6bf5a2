/*
 * import_sglang.c - SGLang responses saved as JSON lines: a /generate
 * response's meta_info.routed_experts (or an OpenAI-compatible response's
 * sglext.routed_experts) is base64 of a flat row-major [T-1, hidden
 * layers, topk] array (int32, or routed_experts_dtype).  Chunks with
 * routed_experts_start_len are joined by sequence id; the exact rules are
 * in docs/jsonl-format.md.
 */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "import_internal.h"

/* A sequence whose chunks are still arriving. */
struct sg_pending {
	char *key;
	uint32_t step;
	struct rlb_import_ids in;
	uint64_t rows;
	uint16_t *ids;			/* token-major [rows][moe_layers][topk] */
	float *gates;
	size_t cap_rows;
};

struct sg_state {
	struct rlb_importer *im;
	struct sg_pending *pend;
	size_t npend, cap;
	uint16_t *ids;			/* one record's converted rows */
	float *gates;
	size_t cap_vals;
	json_t *streams;		/* ids of streamed requests not finished yet (a set) */
};

static void pending_free(struct sg_pending *p)
{
	free(p->key);
	free(p->ids);
	free(p->gates);
	memset(p, 0, sizeof(*p));
}

static int pending_emit(struct sg_state *s, size_t i, struct rlb_err *err)
{
	struct sg_pending p = s->pend[i];
	int ret;

	memmove(s->pend + i, s->pend + i + 1, (s->npend - i - 1) * sizeof(*s->pend));
	s->npend--;
	ret = rlb_importer_emit_token_major(s->im, p.step, &p.in, (uint32_t)p.rows,
					    p.ids, p.gates, err);
	pending_free(&p);
	return ret;
}

/* Emit, in arrival order, every pending sequence of a step before `step`. */
static int flush_before(struct sg_state *s, uint32_t step, int all,
			struct rlb_err *err)
{
	size_t i = 0;
	int ret;

	while (i < s->npend) {
		if (all || s->pend[i].step < step) {
			ret = pending_emit(s, i, err);
			if (ret != 0)
				return ret;
		} else {
			i++;
		}
	}
	return 0;
}

/*
 * Where one record keeps its routing: a native /generate response has
 * everything in meta_info; an OpenAI-compatible one (/v1/completions,
 * /v1/chat/completions) has it in sglext, the token counts in usage and
 * the request id at the top.  The names are field prefixes for messages,
 * the record's own prefix (fp) included.
 */
struct sg_src {
	json_t *re;			/* object with routed_experts and its kin */
	json_t *counts;			/* object with the token counts, or NULL */
	json_t *id;			/* the request id, or NULL */
	char re_name[64];		/* "meta_info.", "sglext." */
	char counts_name[64];		/* "meta_info.", "usage." */
	char id_name[64];		/* "meta_info.id", "id" */
};

static void src_names(struct sg_src *src, const char *fp, const char *re,
		      const char *counts, const char *id)
{
	snprintf(src->re_name, sizeof(src->re_name), "%s%s", fp, re);
	snprintf(src->counts_name, sizeof(src->counts_name), "%s%s", fp, counts);
	snprintf(src->id_name, sizeof(src->id_name), "%s%s", fp, id);
}

/*
 * A streamed chunk of a request that has not finished: SGLang collects the
 * routed experts when a request finishes, so only the last chunk of a
 * stream carries them; the others have meta_info.finish_reason null.
 */
static int unfinished_chunk(json_t *meta)
{
	json_t *fr = json_object_get(meta, "finish_reason");

	return fr && json_is_null(fr);
}

static int has_routing(json_t *obj)
{
	json_t *re = json_object_get(obj, "routed_experts");

	return re && !json_is_null(re);
}

/*
 * What an OpenAI-compatible record without routing is: 1 a streamed chunk
 * of a request not finished yet (object "*.chunk", or a streamed
 * "text_completion", which some servers name like the whole response,
 * whose choices have no finish_reason yet), 2 the usage chunk that
 * stream_options include_usage adds after the last (no choices), 0 a
 * response.
 */
static int openai_chunk(json_t *rec, json_t *choices)
{
	const char *obj = json_string_value(json_object_get(rec, "object"));
	size_t i, n = obj ? strlen(obj) : 0;

	if (n >= 6 && strcmp(obj + n - 6, ".chunk") == 0)
		return json_is_array(choices) && json_array_size(choices) == 0 ? 2 : 1;
	if (!obj || strcmp(obj, "text_completion") != 0 || !json_is_array(choices))
		return 0;
	if (json_array_size(choices) == 0)
		return json_is_object(json_object_get(rec, "usage")) ? 2 : 0;
	for (i = 0; i < json_array_size(choices); i++) {
		json_t *fr = json_object_get(json_array_get(choices, i), "finish_reason");

		if (fr && !json_is_null(fr))
			return 0;
	}
	return 1;
}

/*
 * An OpenAI-compatible response: routing in sglext.routed_experts (SGLang
 * puts the first choice's there, once per response).  The usage counts
 * cover every choice, so they hint at the rows only for a single choice.
 * Streamed chunks without sglext are skipped (openai_chunk); the usage
 * chunk after the last does not count as a request still open.
 */
static int openai_source(json_t *rec, const char *fp, struct sg_src *src,
			 int *skip, struct rlb_err *err)
{
	json_t *ext = json_object_get(rec, "sglext");
	json_t *choices = json_object_get(rec, "choices");
	int chunk;

	if (ext && !json_is_object(ext))
		return rlb_err_set(err, RLB_EPARSE, "%ssglext: expected an object", fp);
	src->id = json_object_get(rec, "id");
	chunk = has_routing(ext) ? 0 : openai_chunk(rec, choices);
	if (chunk) {
		if (chunk == 2)
			src->id = NULL;		/* not tracked */
		*skip = 1;
		return 0;
	}
	if (!has_routing(ext) && (json_object_get(rec, "prompt_routed_experts") ||
				  json_object_get(json_array_get(choices, 0), "routed_experts")))
		return rlb_err_set(err, RLB_EPARSE,
				   "%schoices[0].routed_experts: a vLLM response (routing as "
				   "JSON lists), not SGLang's: convert it to the jsonl format "
				   "(docs/jsonl-format.md) and use --from jsonl", fp);
	src->re = ext;
	if (!json_is_array(choices) || json_array_size(choices) <= 1)
		src->counts = json_object_get(rec, "usage");
	if (!json_is_object(src->counts))
		src->counts = NULL;
	src_names(src, fp, "sglext.", "usage.", "id");
	return 0;
}

/*
 * Find where record REC keeps its routing.  *skip is set for a streamed
 * chunk that carries none (a request not finished yet).
 */
static int find_source(json_t *rec, const char *fp, struct sg_src *src,
		       int *skip, struct rlb_err *err)
{
	json_t *meta = json_object_get(rec, "meta_info");

	memset(src, 0, sizeof(*src));
	*skip = 0;
	if (!meta && (json_object_get(rec, "sglext") || json_object_get(rec, "choices")))
		return openai_source(rec, fp, src, skip, err);
	if (!meta)
		return rlb_err_set(err, RLB_EPARSE,
				   "%smeta_info: missing (expected a /generate response, "
				   "or an OpenAI-compatible one with sglext.routed_experts)", fp);
	if (!json_is_object(meta))
		return rlb_err_set(err, RLB_EPARSE, "%smeta_info: expected an object", fp);
	*skip = !has_routing(meta) && unfinished_chunk(meta);
	src->re = meta;
	src->counts = meta;
	src->id = json_object_get(meta, "id");
	src_names(src, fp, "meta_info.", "meta_info.", "meta_info.id");
	return 0;
}

/*
 * Keep track of streamed requests by id: one whose chunk came without the
 * routing (UNFINISHED) is in s->streams until a record of that id brings
 * it.  Those left at the end never finished (rlb_import_stats.unfinished).
 */
static int track_stream(struct sg_state *s, const struct sg_src *src, int unfinished,
			struct rlb_err *err)
{
	char buf[32];
	const char *key;

	if (json_is_string(src->id)) {
		key = json_string_value(src->id);
	} else if (json_is_integer(src->id)) {
		snprintf(buf, sizeof(buf), "%" JSON_INTEGER_FORMAT, json_integer_value(src->id));
		key = buf;
	} else {
		return 0;	/* no id: nothing to pair the chunks by */
	}
	if (!unfinished) {
		if (s->streams)
			json_object_del(s->streams, key);
		return 0;
	}
	if (!s->streams)
		s->streams = json_object();
	if (!s->streams || json_object_set_new(s->streams, key, json_true()) != 0)
		return rlb_err_set(err, RLB_ENOMEM, "out of memory");
	return 0;
}

static int get_key(json_t *rec, const struct sg_src *src, const char *fp,
		   char **key, struct rlb_err *err)
{
	json_t *v = json_object_get(rec, "sequence_id");
	char field[96], buf[32];

	*key = NULL;
	snprintf(field, sizeof(field), "%ssequence_id", fp);
	if (!v || json_is_null(v)) {
		v = src->id;
		snprintf(field, sizeof(field), "%s", src->id_name);
	}
	if (!v || json_is_null(v))
		return rlb_err_set(err, RLB_EPARSE,
				   "%s: missing (needed to join routed_experts_start_len chunks)",
				   src->id_name);
	if (json_is_string(v)) {
		*key = strdup(json_string_value(v));
	} else if (json_is_integer(v)) {
		snprintf(buf, sizeof(buf), "%" JSON_INTEGER_FORMAT, json_integer_value(v));
		*key = strdup(buf);
	} else {
		return rlb_err_set(err, RLB_EPARSE, "%s: expected a string or an integer",
				   field);
	}
	if (!*key)
		return rlb_err_set(err, RLB_ENOMEM, "out of memory");
	return 0;
}

static int pending_append(struct sg_pending *p, const struct rlb_importer *im,
			  uint64_t start, const uint16_t *ids, const float *gates,
			  uint64_t rows, struct rlb_err *err)
{
	size_t per = (size_t)im->moe_layers * im->topk;
	uint64_t need = start + rows;

	if (need > p->cap_rows) {
		size_t cap = p->cap_rows ? p->cap_rows : 64;
		uint16_t *ni;

		while (cap < need)
			cap *= 2;
		ni = realloc(p->ids, cap * per * sizeof(*ni));
		if (!ni)
			return rlb_err_set(err, RLB_ENOMEM, "out of memory");
		p->ids = ni;
		if (im->gates) {
			float *ng = realloc(p->gates, cap * per * sizeof(*ng));

			if (!ng)
				return rlb_err_set(err, RLB_ENOMEM, "out of memory");
			p->gates = ng;
		}
		p->cap_rows = cap;
	}
	if (rows) {
		memcpy(p->ids + start * per, ids, rows * per * sizeof(*ids));
		if (im->gates)
			memcpy(p->gates + start * per, gates, rows * per * sizeof(*gates));
	}
	p->rows = need;
	return 0;
}

/* rlb_json_opt_uint with the field named PREFIX KEY (PREFIX ends in "."). */
static int field_uint(json_t *obj, const char *prefix, const char *key,
		      int64_t max, int64_t *out, struct rlb_err *err)
{
	char field[160];

	snprintf(field, sizeof(field), "%s%s", prefix, key);
	return rlb_json_opt_uint(obj, key, field, max, out, err);
}

static int parse_dtype(json_t *obj, const char *rp, enum rlb_import_dtype *dt,
		       struct rlb_err *err)
{
	json_t *v = json_object_get(obj, "routed_experts_dtype");
	const char *s;

	*dt = RLB_DT_I32;
	if (!v || json_is_null(v))
		return 0;
	s = json_string_value(v);
	if (s && strcmp(s, "int32") == 0)
		*dt = RLB_DT_I32;
	else if (s && strcmp(s, "uint16") == 0)
		*dt = RLB_DT_U16;
	else if (s && strcmp(s, "uint8") == 0)
		*dt = RLB_DT_U8;
	else
		return rlb_err_set(err, RLB_EPARSE,
				   "%srouted_experts_dtype: expected \"int32\", \"uint16\" or \"uint8\"",
				   rp);
	return 0;
}

/*
 * Rows of a flat array of `values` ids: hidden layers per row when that
 * divides, else MoE layers only; `hint` (rows from the token counts, or
 * -1) settles the case where both divide.
 */
static int shape_rows(const struct rlb_importer *im, uint64_t values, int64_t hint,
		      uint64_t *rows, uint64_t *layers, const char *rp,
		      struct rlb_err *err)
{
	uint64_t hidden = im->hidden_layers;
	uint64_t per_h = hidden * im->topk, per_m = (uint64_t)im->moe_layers * im->topk;
	int ok_h = values % per_h == 0;
	int ok_m = hidden != im->moe_layers && values % per_m == 0;

	if (ok_h && ok_m && hint >= 0 && values / per_m == (uint64_t)hint &&
	    values / per_h != (uint64_t)hint)
		ok_h = 0;
	if (ok_h) {
		*rows = values / per_h;
		*layers = hidden;
		return 0;
	}
	if (ok_m) {
		*rows = values / per_m;
		*layers = im->moe_layers;
		return 0;
	}
	if (hidden == im->moe_layers)
		return rlb_err_set(err, RLB_EMISMATCH,
				   "%srouted_experts: %" PRIu64
				   " values is not a multiple of %" PRIu64 " layers x %" PRIu32 " (topk)",
				   rp, values, hidden, im->topk);
	return rlb_err_set(err, RLB_EMISMATCH,
			   "%srouted_experts: %" PRIu64
			   " values is not a multiple of %" PRIu64 " layers x %" PRIu32
			   " (topk) nor of %" PRIu32 " MoE layers x %" PRIu32,
			   rp, values, hidden, im->topk, im->moe_layers, im->topk);
}

static int grow_vals(struct sg_state *s, size_t n, struct rlb_err *err)
{
	if (n <= s->cap_vals)
		return 0;
	free(s->ids);
	free(s->gates);
	s->ids = malloc(n * sizeof(*s->ids));
	s->gates = malloc(n * sizeof(*s->gates));
	s->cap_vals = s->ids && s->gates ? n : 0;
	if (!s->cap_vals)
		return rlb_err_set(err, RLB_ENOMEM, "out of memory");
	return 0;
}

/*
 * Check one record's converted gates (token-major [rows][moe_layers][topk]
 * of an input with `layers` layers per row): each finite and >= 0.  The
 * message names row, layer and column as rlb_import_convert does.
 */
static int check_gates(const struct rlb_importer *im, const float *gates,
		       uint64_t rows, uint64_t layers, const char *rp,
		       struct rlb_err *err)
{
	uint64_t i, n = rows * im->moe_layers * im->topk;
	uint64_t K = im->topk, L = im->moe_layers;
	struct rlb_layer_map map;
	int ret;

	/* the input's layer of each MoE layer (dense ones may sit between) */
	ret = rlb_importer_layer_map(im, layers, &map, err);
	if (ret != 0)
		return ret;
	for (i = 0; i < n; i++) {
		if (!rlb_trace_gate_ok(gates[i]))
			return rlb_err_set(err, RLB_ERANGE,
					   "%srouted_experts_gates: value %.9g at row %" PRIu64
					   ", layer %" PRIu64 ", column %" PRIu64
					   " is not a finite non-negative float32",
					   rp, (double)gates[i], i / (L * K),
					   rlb_layer_map_at(&map, i / K % L), i % K);
	}
	return 0;
}

/*
 * Decode record SRC's routing into s->ids (and s->gates): *rows rows,
 * token-major, MoE layers only.  HINT: rows the token counts give, or -1.
 */
static int decode_routing(struct sg_state *s, const struct sg_src *src,
			  int64_t hint, uint64_t *rows, struct rlb_err *err)
{
	struct rlb_importer *im = s->im;
	const char *rp = src->re_name;
	json_t *re = json_object_get(src->re, "routed_experts"), *ge;
	uint8_t *bytes = NULL, *gbytes = NULL;
	size_t nbytes = 0, ngbytes = 0, esz;
	enum rlb_import_dtype dt;
	uint64_t layers = 0, values;
	struct rlb_import_raw raw;
	int ret;

	if (!re || json_is_null(re))
		return rlb_err_set(err, RLB_EPARSE,
				   "%srouted_experts: missing (send requests with return_routed_experts)",
				   rp);
	if (!json_is_string(re))
		return rlb_err_set(err, RLB_EPARSE,
				   "%srouted_experts: expected a base64 string", rp);
	ret = parse_dtype(src->re, rp, &dt, err);
	if (ret != 0)
		return ret;
	ret = rlb_base64_decode(json_string_value(re), json_string_length(re),
				&bytes, &nbytes, err);
	if (ret != 0) {
		rlb_err_prefix(err, "%srouted_experts", rp);
		goto out;
	}
	esz = rlb_import_dtype_bytes(dt);
	if (nbytes % esz != 0) {
		ret = rlb_err_set(err, RLB_EPARSE,
				  "%srouted_experts: %zu bytes is not a multiple of %zu (the dtype's size)",
				  rp, nbytes, esz);
		goto out;
	}
	values = nbytes / esz;
	ret = shape_rows(im, values, hint, rows, &layers, rp, err);
	if (ret != 0)
		goto out;
	if (im->gates) {
		ge = json_object_get(src->re, "routed_experts_gates");
		if (!json_is_string(ge)) {
			ret = rlb_err_set(err, RLB_EPARSE,
					  "%srouted_experts_gates: missing (--gates needs gate weights in every record)",
					  rp);
			goto out;
		}
		ret = rlb_base64_decode(json_string_value(ge), json_string_length(ge),
					&gbytes, &ngbytes, err);
		if (ret != 0) {
			rlb_err_prefix(err, "%srouted_experts_gates", rp);
			goto out;
		}
		if (ngbytes != values * 4) {
			ret = rlb_err_set(err, RLB_EMISMATCH,
					  "%srouted_experts_gates: %zu bytes, expected %" PRIu64
					  " (float32, the shape of routed_experts)",
					  rp, ngbytes, values * 4);
			goto out;
		}
	}
	if (*rows > RLB_TRACE_MAX_SEQ_TOKENS) {
		ret = rlb_err_set(err, RLB_ERANGE,
				  "%srouted_experts: %" PRIu64 " rows is above the limit of %u",
				  rp, *rows, RLB_TRACE_MAX_SEQ_TOKENS);
		goto out;
	}
	ret = grow_vals(s, (size_t)(*rows * im->moe_layers * im->topk) + 1, err);
	if (ret != 0)
		goto out;
	memset(&raw, 0, sizeof(raw));
	raw.data = bytes;
	raw.dtype = dt;
	raw.rows = *rows;
	raw.layers = layers;
	raw.topk = im->topk;
	raw.gates = gbytes;
	raw.byte_base = -1;
	ret = rlb_import_convert(im, &raw, s->ids, im->gates ? s->gates : NULL, err);
	if (ret != 0) {
		rlb_err_prefix(err, "%srouted_experts", rp);
		goto out;
	}
	if (im->gates)
		ret = check_gates(im, s->gates, *rows, layers, rp, err);
out:
	free(bytes);
	free(gbytes);
	return ret;
}

/* The pending sequence KEY of a record whose chunk starts at row 0 (new). */
static int pending_start(struct sg_state *s, char **key, uint32_t step,
			 const struct rlb_import_ids *in, size_t *at,
			 struct rlb_err *err)
{
	size_t i;
	int ret;

	for (i = 0; i < s->npend; i++) {
		if (strcmp(s->pend[i].key, *key) == 0) {
			ret = pending_emit(s, i, err);
			if (ret != 0)
				return ret;
			break;
		}
	}
	if (s->npend == s->cap) {
		size_t cap = s->cap ? s->cap * 2 : 8;
		struct sg_pending *np = realloc(s->pend, cap * sizeof(*np));

		if (!np)
			return rlb_err_set(err, RLB_ENOMEM, "out of memory");
		s->pend = np;
		s->cap = cap;
	}
	i = s->npend++;
	memset(&s->pend[i], 0, sizeof(s->pend[i]));
	s->pend[i].key = *key;
	*key = NULL;
	s->pend[i].step = step;
	s->pend[i].in = *in;
	*at = i;
	return 0;
}

/*
 * Place ROWS decoded rows (in s->ids) starting at row START of the
 * sequence KEY (taken over when a new sequence starts).  KEYED_BY names
 * the request-id field the key came from (NULL: sequence_id), for the
 * hint when a continuation finds no start.
 */
static int place_chunk(struct sg_state *s, char **key, const char *keyed_by,
		       int64_t start, uint64_t rows, uint32_t step,
		       const struct rlb_import_ids *in, const struct sg_src *src,
		       struct rlb_err *err)
{
	const char *rp = src->re_name;
	size_t i = 0;
	int ret;

	if (start == 0) {
		ret = pending_start(s, key, step, in, &i, err);
		if (ret != 0)
			return ret;
	} else {
		for (i = 0; i < s->npend; i++)
			if (strcmp(s->pend[i].key, *key) == 0)
				break;
		if (i == s->npend)
			return rlb_err_set(err, RLB_EINVAL,
					   "%srouted_experts_start_len: %" PRId64
					   " but no earlier record of sequence '%s' in step %" PRIu32
					   "%s%s%s",
					   rp, start, *key, step,
					   keyed_by ? " (keyed by " : "", keyed_by ? keyed_by : "",
					   keyed_by ? ", each request's own id: put the same top-level "
						      "sequence_id on every turn of a sequence)" : "");
		if ((uint64_t)start > s->pend[i].rows)
			return rlb_err_set(err, RLB_EINVAL,
					   "%srouted_experts_start_len: %" PRId64
					   " is past the %" PRIu64 " rows of sequence '%s' received so far",
					   rp, start, s->pend[i].rows, *key);
	}
	if ((uint64_t)start + rows > RLB_TRACE_MAX_SEQ_TOKENS)
		return rlb_err_set(err, RLB_ERANGE,
				   "%srouted_experts: sequence '%s' grows above %u rows",
				   rp, s->pend[i].key, RLB_TRACE_MAX_SEQ_TOKENS);
	return pending_append(&s->pend[i], s->im, (uint64_t)start, s->ids, s->gates,
			      rows, err);
}

/* One response object; messages start with the field (fp prefixes it). */
static int sglang_record(struct sg_state *s, json_t *rec, const char *fp,
			 struct rlb_err *err)
{
	struct rlb_importer *im = s->im;
	struct rlb_import_ids in = { -1, -1, -1 };
	int64_t start = -1, hint = -1, pt = -1, ct = -1;
	const char *keyed_by = NULL;
	struct sg_src src;
	json_t *sid;
	uint64_t rows = 0;
	char *key = NULL;
	uint32_t step;
	int ret, skip;

	if (!json_is_object(rec)) {
		if (fp[0])
			return rlb_err_set(err, RLB_EPARSE, "%.*s: expected a JSON object",
					   (int)strlen(fp) - 1, fp);
		return rlb_err_set(err, RLB_EPARSE, "expected a JSON object");
	}
	ret = find_source(rec, fp, &src, &skip, err);
	if (ret == 0)
		ret = track_stream(s, &src, skip, err);
	if (ret != 0 || skip)
		return ret;
	if ((ret = field_uint(rec, fp, "step", UINT32_MAX, &in.step, err)) ||
	    (ret = field_uint(rec, fp, "group", UINT32_MAX, &in.group, err)) ||
	    (ret = field_uint(rec, fp, "sample", UINT32_MAX, &in.sample, err)))
		return ret;
	if (in.sample < 0 &&
	    (ret = field_uint(rec, fp, "index", UINT32_MAX, &in.sample, err)))
		return ret;
	ret = rlb_importer_step(im, in.step, &step, err);
	if (ret != 0) {
		if (fp[0])
			rlb_err_prefix(err, "%.*s", (int)strlen(fp) - 1, fp);
		return ret;
	}
	ret = flush_before(s, step, 0, err);
	if (ret != 0)
		return ret;

	if ((ret = field_uint(src.re, src.re_name, "routed_experts_start_len",
			      RLB_TRACE_MAX_SEQ_TOKENS, &start, err)))
		return ret;
	if (start >= 0) {
		ret = get_key(rec, &src, fp, &key, err);
		if (ret != 0)
			return ret;
		sid = json_object_get(rec, "sequence_id");
		if (!sid || json_is_null(sid))
			keyed_by = src.id_name;
	}
	/* Bounded, so that their sum cannot overflow. */
	if (src.counts &&
	    ((ret = field_uint(src.counts, src.counts_name, "prompt_tokens", UINT32_MAX,
			       &pt, err)) ||
	     (ret = field_uint(src.counts, src.counts_name, "completion_tokens",
			       UINT32_MAX, &ct, err))))
		goto out;
	if (pt >= 0 && ct >= 0 && pt + ct >= 1 + (start > 0 ? start : 0))
		hint = pt + ct - 1 - (start > 0 ? start : 0);
	ret = decode_routing(s, &src, hint, &rows, err);
	if (ret != 0)
		goto out;
	if (start < 0)
		ret = rlb_importer_emit_token_major(im, step, &in, (uint32_t)rows,
						    s->ids, s->gates, err);
	else
		ret = place_chunk(s, &key, keyed_by, start, rows, step, &in, &src, err);
out:
	free(key);
	return ret;
}

int rlb_import_sglang(struct rlb_importer *im, FILE *fp, struct rlb_err *err)
{
	struct rlb_line_reader r;
	struct sg_state s;
	json_t *doc = NULL;
	size_t i;
	int ret = 0;

	memset(&r, 0, sizeof(r));
	memset(&s, 0, sizeof(s));
	r.fp = fp;
	r.name = im->name;
	s.im = im;
	for (;;) {
		ret = rlb_line_next(&r, err);
		if (ret <= 0)
			break;
		ret = rlb_line_json(&r, &doc, err);
		if (ret != 0)
			break;
		im->records++;
		if (json_is_array(doc)) {
			for (i = 0; i < json_array_size(doc) && ret == 0; i++) {
				char fpx[32];

				snprintf(fpx, sizeof(fpx), "[%zu].", i);
				ret = sglang_record(&s, json_array_get(doc, i), fpx, err);
			}
		} else {
			ret = sglang_record(&s, doc, "", err);
		}
		json_decref(doc);
		doc = NULL;
		if (ret != 0) {
			rlb_err_prefix(err, "%s:%" PRIu64, im->name, r.lineno);
			break;
		}
		if (im->progress)
			im->progress(im->progress_ctx, im->records, 0, "records");
	}
	if (ret == 0) {
		ret = flush_before(&s, 0, 1, err);
		if (ret != 0)
			rlb_err_prefix(err, "%s", im->name);
	}
	im->unfinished = json_object_size(s.streams);
	json_decref(s.streams);
	for (i = 0; i < s.npend; i++)
		pending_free(&s.pend[i]);
	free(s.pend);
	free(s.ids);
	free(s.gates);
	rlb_line_release(&r);
	return ret;
}
