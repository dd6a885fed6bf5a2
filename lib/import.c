/*
 * import.c - importers of rollout engines' routing dumps: format names,
 * dispatch, and what the formats share: assignment of step / group /
 * sample ids, dense-layer dropping, id checks, base64, line reading.
 * The formats themselves are in import_sglang.c, import_vllm.c,
 * import_megatron.c and import_jsonl.c.
 */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "import_internal.h"
#include "sniff.h"
#include "util.h"

static const char *const format_names[] = {
	[RLB_IMPORT_SGLANG] = "sglang",
	[RLB_IMPORT_VLLM] = "vllm",
	[RLB_IMPORT_MEGATRON] = "megatron",
	[RLB_IMPORT_JSONL] = "jsonl",
};

#define NFORMATS (sizeof(format_names) / sizeof(format_names[0]))

int rlb_import_format_from_name(const char *name, enum rlb_import_format *f,
				struct rlb_err *err)
{
	size_t i;

	for (i = 0; i < NFORMATS; i++) {
		if (name && strcmp(name, format_names[i]) == 0) {
			*f = (enum rlb_import_format)i;
			return 0;
		}
	}
	return rlb_err_set(err, RLB_EINVAL,
			   "unknown format '%s' (expected sglang, vllm, megatron or jsonl)",
			   name ? name : "");
}

/* ---- importer state ---------------------------------------------------- */

int rlb_importer_init(struct rlb_importer *im, const struct rlb_import_opts *opts,
		      const struct rlb_config *cfg, const char *name,
		      rlb_import_sink_fn sink, void *sink_ctx,
		      rlb_progress_fn progress, void *progress_ctx,
		      struct rlb_err *err)
{
	const struct rlb_model_config *m = &cfg->model;

	memset(im, 0, sizeof(*im));
	if (m->experts < 1 || m->experts > RLB_TRACE_MAX_EXPERTS)
		return rlb_err_set(err, RLB_ECONFIG,
				   "model.experts %d is outside [1, %d]",
				   m->experts, RLB_TRACE_MAX_EXPERTS);
	if (m->topk < 1 || m->topk > RLB_TRACE_MAX_TOPK || m->topk > m->experts)
		return rlb_err_set(err, RLB_ECONFIG,
				   "model.topk %d is outside [1, %d]", m->topk,
				   m->experts < RLB_TRACE_MAX_TOPK ? m->experts
								   : RLB_TRACE_MAX_TOPK);
	if (m->moe_layers < 1 || m->moe_layers > RLB_TRACE_MAX_LAYERS)
		return rlb_err_set(err, RLB_ECONFIG,
				   "model.moe_layers %d is outside [1, %d]",
				   m->moe_layers, RLB_TRACE_MAX_LAYERS);
	if (m->first_dense_layers < 0 || m->first_dense_layers > RLB_TRACE_MAX_LAYERS)
		return rlb_err_set(err, RLB_ECONFIG,
				   "model.first_dense_layers %d is outside [0, %d]",
				   m->first_dense_layers, RLB_TRACE_MAX_LAYERS);
	if (m->moe_layer_period > RLB_MAX_MOE_LAYER_PERIOD || m->moe_layer_offset < 0 ||
	    m->moe_layer_offset >= (m->moe_layer_period > 1 ? m->moe_layer_period : 1))
		return rlb_err_set(err, RLB_ECONFIG,
				   "model.moe_layer_period %d and model.moe_layer_offset %d "
				   "are not a layout (offset below a period of 1 to %d)",
				   m->moe_layer_period, m->moe_layer_offset,
				   RLB_MAX_MOE_LAYER_PERIOD);
	if (opts->step > (int64_t)UINT32_MAX || opts->group > (int64_t)UINT32_MAX)
		return rlb_err_set(err, RLB_EINVAL, "step or group id above %" PRIu32,
				   UINT32_MAX);
	im->opts = opts;
	im->cfg = cfg;
	im->name = name;
	im->sink = sink;
	im->sink_ctx = sink_ctx;
	im->progress = progress;
	im->progress_ctx = progress_ctx;
	im->gates = opts->gates != 0;
	im->experts = (uint32_t)m->experts;
	im->topk = (uint32_t)m->topk;
	im->moe_layers = (uint32_t)m->moe_layers;
	im->hidden_layers = (uint32_t)rlb_model_hidden_layers(m);
	im->first_moe = (uint32_t)rlb_model_moe_layer_index(m, 0);
	im->period = m->moe_layer_period > 1 ? (uint32_t)m->moe_layer_period : 1;
	if (m->layer_pattern[0]) {
		uint32_t j;

		im->pattern = m->layer_pattern;
		for (j = 0; j < im->moe_layers; j++)
			im->moe_at[j] = (uint16_t)rlb_model_moe_layer_index(m, j);
	}
	return 0;
}

void rlb_importer_release(struct rlb_importer *im)
{
	free(im->ids);
	free(im->gate_buf);
	im->ids = NULL;
	im->gate_buf = NULL;
	im->ids_cap = im->gate_cap = 0;
}

int rlb_importer_step(struct rlb_importer *im, int64_t in_step, uint32_t *step,
		      struct rlb_err *err)
{
	int64_t s = im->opts->step >= 0 ? im->opts->step : in_step >= 0 ? in_step : 0;

	if (s > (int64_t)UINT32_MAX)
		return rlb_err_set(err, RLB_ERANGE, "step: %" PRId64 " is above %" PRIu32,
				   s, UINT32_MAX);
	if (im->have_seen_step && (uint32_t)s < im->seen_step)
		return rlb_err_set(err, RLB_EINVAL,
				   "step: %" PRId64 " comes after step %" PRIu32
				   " (steps must not decrease)", s, im->seen_step);
	im->have_seen_step = 1;
	im->seen_step = (uint32_t)s;
	*step = (uint32_t)s;
	return 0;
}

/*
 * Group and sample of the next sequence of `step` (rules:
 * docs/jsonl-format.md).  An id past UINT32_MAX (--group near the top
 * with --group-size, a sample after sample UINT32_MAX, 2^32 sequences
 * in a step) is RLB_ERANGE rather than a silent wrap to 0.
 */
static int assign_ids(struct rlb_importer *im, uint32_t step,
		      const struct rlb_import_ids *in, uint32_t *group,
		      uint32_t *sample, struct rlb_err *err)
{
	const struct rlb_import_opts *o = im->opts;
	uint64_t n;

	if (!im->have_step || step != im->step) {
		im->ordinal = 0;
		im->have_prev = 0;
	}
	n = im->ordinal;
	if (o->group_size > 0) {
		uint64_t base = o->group >= 0 ? (uint64_t)o->group : 0;
		uint64_t g = base + n / o->group_size;

		if (g > UINT32_MAX)
			return rlb_err_set(err, RLB_ERANGE,
					   "group: sequence %" PRIu64 " of step %" PRIu32
					   " gets group %" PRIu64 " (--group %" PRIu64
					   " --group-size %" PRIu32 "), above %" PRIu32,
					   n, step, g, base, o->group_size, UINT32_MAX);
		*group = (uint32_t)g;
		*sample = (uint32_t)(n % o->group_size);
		return 0;
	}
	if (o->group < 0 && in->group >= 0) {
		*group = (uint32_t)in->group;
		if (in->sample >= 0) {
			*sample = (uint32_t)in->sample;
		} else if (im->have_prev && im->prev_group == *group) {
			if (im->prev_sample == UINT32_MAX)
				return rlb_err_set(err, RLB_ERANGE,
						   "sample: the sequence after sample %" PRIu32
						   " of group %" PRIu32 " gets sample %" PRIu64
						   ", above %" PRIu32, im->prev_sample, *group,
						   (uint64_t)im->prev_sample + 1, UINT32_MAX);
			*sample = im->prev_sample + 1;
		} else {
			*sample = 0;
		}
		return 0;
	}
	/* The ordinal becomes the sample (--group) or the group (no group). */
	if (n > UINT32_MAX && (o->group < 0 || in->sample < 0))
		return rlb_err_set(err, RLB_ERANGE,
				   "%s: sequence %" PRIu64 " of step %" PRIu32
				   " gets %s %" PRIu64 ", above %" PRIu32,
				   o->group >= 0 ? "sample" : "group", n, step,
				   o->group >= 0 ? "sample" : "group", n, UINT32_MAX);
	if (o->group >= 0) {
		*group = (uint32_t)o->group;
		*sample = in->sample >= 0 ? (uint32_t)in->sample : (uint32_t)n;
	} else {
		*group = (uint32_t)n;
		*sample = in->sample >= 0 ? (uint32_t)in->sample : 0;
	}
	return 0;
}

int rlb_importer_emit(struct rlb_importer *im, uint32_t step,
		      const struct rlb_import_ids *in, uint32_t tokens,
		      const uint16_t *ids, const float *gates,
		      struct rlb_err *err)
{
	struct rlb_seq seq;
	int ret;

	if (tokens == 0)
		return 0;
	if (tokens > RLB_TRACE_MAX_SEQ_TOKENS)
		return rlb_err_set(err, RLB_ERANGE,
				   "sequence of %" PRIu32 " tokens is above the limit of %u",
				   tokens, RLB_TRACE_MAX_SEQ_TOKENS);
	memset(&seq, 0, sizeof(seq));
	seq.step = step;
	ret = assign_ids(im, step, in, &seq.group, &seq.sample, err);
	if (ret != 0)
		return ret;
	seq.tokens = tokens;
	seq.ids = ids;
	seq.gates = im->gates ? gates : NULL;
	ret = im->sink(im->sink_ctx, &seq, err);
	if (ret != 0)
		return ret;
	im->have_step = 1;
	im->step = step;
	im->ordinal++;
	im->have_prev = 1;
	im->prev_group = seq.group;
	im->prev_sample = seq.sample;
	im->sequences++;
	im->tokens += tokens;
	return 0;
}

static int grow(void **p, size_t *cap, size_t need, size_t elem,
		struct rlb_err *err)
{
	void *n;

	if (need <= *cap)
		return 0;
	if (need > SIZE_MAX / elem)
		return rlb_err_set(err, RLB_ENOMEM, "out of memory");
	n = realloc(*p, need * elem);
	if (!n)
		return rlb_err_set(err, RLB_ENOMEM, "out of memory");
	*p = n;
	*cap = need;
	return 0;
}

int rlb_importer_emit_token_major(struct rlb_importer *im, uint32_t step,
				  const struct rlb_import_ids *in,
				  uint32_t tokens, const uint16_t *ids,
				  const float *gates, struct rlb_err *err)
{
	size_t L = im->moe_layers, K = im->topk, T = tokens, n = L * T * K;
	size_t t, l;
	int ret;

	if (tokens == 0)
		return 0;
	ret = grow((void **)&im->ids, &im->ids_cap, n, sizeof(*im->ids), err);
	if (ret == 0 && im->gates && gates)
		ret = grow((void **)&im->gate_buf, &im->gate_cap, n,
			   sizeof(*im->gate_buf), err);
	if (ret != 0)
		return ret;
	for (t = 0; t < T; t++) {
		for (l = 0; l < L; l++) {
			memcpy(im->ids + (l * T + t) * K, ids + (t * L + l) * K,
			       K * sizeof(*ids));
			if (im->gates && gates)
				memcpy(im->gate_buf + (l * T + t) * K,
				       gates + (t * L + l) * K, K * sizeof(*gates));
		}
	}
	return rlb_importer_emit(im, step, in, tokens, im->ids,
				 im->gates && gates ? im->gate_buf : NULL, err);
}

int rlb_importer_layer_map(const struct rlb_importer *im, uint64_t layers,
			   struct rlb_layer_map *map, struct rlb_err *err)
{
	map->at = NULL;
	if (layers == im->hidden_layers) {
		map->first = im->first_moe;
		map->stride = im->period;
		if (im->pattern)
			map->at = im->moe_at;
		return 0;
	}
	if (layers == im->moe_layers) {
		map->first = 0;
		map->stride = 1;
		return 0;
	}
	if (im->hidden_layers == im->moe_layers)
		return rlb_err_set(err, RLB_EMISMATCH,
				   "%" PRIu64 " layers, the config has %" PRIu32 " MoE layers",
				   layers, im->moe_layers);
	if (im->pattern)	/* its other layers are not all dense */
		return rlb_err_set(err, RLB_EMISMATCH,
				   "%" PRIu64 " layers, the config has %" PRIu32
				   " (model.layer_pattern's letters, %" PRIu32 " of them MoE) or %"
				   PRIu32 " MoE layers", layers, im->hidden_layers, im->moe_layers,
				   im->moe_layers);
	return rlb_err_set(err, RLB_EMISMATCH,
			   "%" PRIu64 " layers, the config has %" PRIu32
			   " (%" PRIu32 " dense + %" PRIu32 " MoE) or %" PRIu32 " MoE layers",
			   layers, im->hidden_layers, im->hidden_layers - im->moe_layers,
			   im->moe_layers, im->moe_layers);
}

/* ---- raw arrays -------------------------------------------------------- */

size_t rlb_import_dtype_bytes(enum rlb_import_dtype dt)
{
	switch (dt) {
	case RLB_DT_I8:
	case RLB_DT_U8:
		return 1;
	case RLB_DT_I16:
	case RLB_DT_U16:
		return 2;
	case RLB_DT_I32:
	case RLB_DT_U32:
		return 4;
	case RLB_DT_I64:
		return 8;
	}
	return 1;
}

static int64_t raw_get(const uint8_t *p, enum rlb_import_dtype dt)
{
	switch (dt) {
	case RLB_DT_I8:
		return (int8_t)p[0];
	case RLB_DT_U8:
		return p[0];
	case RLB_DT_I16:
		return (int16_t)rlb_get_u16(p);
	case RLB_DT_U16:
		return rlb_get_u16(p);
	case RLB_DT_I32:
		return (int32_t)rlb_get_u32(p);
	case RLB_DT_U32:
		return rlb_get_u32(p);
	case RLB_DT_I64:
		return (int64_t)rlb_get_u64(p);
	}
	return -1;
}

int rlb_import_convert(const struct rlb_importer *im,
		       const struct rlb_import_raw *raw, uint16_t *ids_out,
		       float *gates_out, struct rlb_err *err)
{
	size_t esz = rlb_import_dtype_bytes(raw->dtype);
	uint64_t r, j, k, K = raw->topk, Lin = raw->layers, L = im->moe_layers;
	struct rlb_layer_map map;
	int ret;

	if (raw->topk != im->topk)
		return rlb_err_set(err, RLB_EMISMATCH,
				   "topk %" PRIu64 ", the config has %" PRIu32,
				   raw->topk, im->topk);
	ret = rlb_importer_layer_map(im, raw->layers, &map, err);
	if (ret != 0)
		return ret;
	for (r = 0; r < raw->rows; r++) {
		for (j = 0; j < L; j++) {
			uint64_t l = rlb_layer_map_at(&map, j);
			uint64_t in_base = (r * Lin + l) * K;
			uint64_t out_base = (r * L + j) * K;

			for (k = 0; k < K; k++) {
				int64_t v = raw_get(raw->data + (in_base + k) * esz,
						    raw->dtype);

				if (v < 0 || v >= (int64_t)im->experts) {
					rlb_err_set(err, RLB_ERANGE,
						    "value %" PRId64 " at row %" PRIu64
						    ", layer %" PRIu64 ", column %" PRIu64
						    " is not an expert id in [0, %" PRIu32 ")",
						    v, r, l, k, im->experts);
					if (raw->byte_base >= 0) {
						size_t n = strlen(err ? err->msg : "");

						if (err)
							snprintf(err->msg + n, sizeof(err->msg) - n,
								 " (byte %" PRIu64 ")",
								 (uint64_t)raw->byte_base +
								 (in_base + k) * esz);
					}
					return RLB_ERANGE;
				}
				ids_out[out_base + k] = (uint16_t)v;
				if (gates_out && raw->gates)
					gates_out[out_base + k] =
						rlb_get_f32(raw->gates + (in_base + k) * 4);
			}
		}
	}
	return 0;
}

/* ---- base64 ------------------------------------------------------------ */

/* Value of each byte in the standard alphabet, -1 for the others. */
static const int8_t b64_table[256] = {
	-1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
	-1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
	-1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, 62, -1, -1, -1, 63,
	52, 53, 54, 55, 56, 57, 58, 59, 60, 61, -1, -1, -1, -1, -1, -1,
	-1,  0,  1,  2,  3,  4,  5,  6,  7,  8,  9, 10, 11, 12, 13, 14,
	15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, -1, -1, -1, -1, -1,
	-1, 26, 27, 28, 29, 30, 31, 32, 33, 34, 35, 36, 37, 38, 39, 40,
	41, 42, 43, 44, 45, 46, 47, 48, 49, 50, 51, -1, -1, -1, -1, -1,
	-1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
	-1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
	-1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
	-1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
	-1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
	-1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
	-1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
	-1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
};

static int b64_value(unsigned char c)
{
	return b64_table[c];
}

int rlb_base64_decode(const char *s, size_t len, uint8_t **out,
		      size_t *out_len, struct rlb_err *err)
{
	size_t i, pad = 0, o = 0;
	uint8_t *buf;

	*out = NULL;
	*out_len = 0;
	for (i = 0; i < len; i++) {
		unsigned char c = (unsigned char)s[i];

		if (c == '=') {
			/* Padding: only the last one or two characters. */
			if (i + 2 < len || (i + 2 == len && s[len - 1] != '='))
				return rlb_err_set(err, RLB_EPARSE,
						   "misplaced base64 padding at byte %zu", i);
			if (pad == 0)
				pad = len - i;
			continue;
		}
		if (b64_value(c) < 0) {
			if (isprint(c))
				return rlb_err_set(err, RLB_EPARSE,
						   "invalid base64 character '%c' at byte %zu",
						   c, i);
			return rlb_err_set(err, RLB_EPARSE,
					   "invalid base64 character 0x%02x at byte %zu",
					   c, i);
		}
	}
	if (len % 4 != 0)
		return rlb_err_set(err, RLB_EPARSE,
				   "base64 length %zu is not a multiple of 4", len);
	if (pad == 2 && (b64_value((unsigned char)s[len - 3]) & 0x0f))
		return rlb_err_set(err, RLB_EPARSE,
				   "non-zero bits before base64 padding at byte %zu",
				   len - 3);
	if (pad == 1 && (b64_value((unsigned char)s[len - 2]) & 0x03))
		return rlb_err_set(err, RLB_EPARSE,
				   "non-zero bits before base64 padding at byte %zu",
				   len - 2);
	buf = malloc(len / 4 * 3 + 1);
	if (!buf)
		return rlb_err_set(err, RLB_ENOMEM, "out of memory");
	for (i = 0; i + 4 < len || (i + 4 == len && pad == 0); i += 4) {
		uint32_t v = (uint32_t)b64_table[(unsigned char)s[i]] << 18 |
			     (uint32_t)b64_table[(unsigned char)s[i + 1]] << 12 |
			     (uint32_t)b64_table[(unsigned char)s[i + 2]] << 6 |
			     (uint32_t)b64_table[(unsigned char)s[i + 3]];

		buf[o++] = (uint8_t)(v >> 16);
		buf[o++] = (uint8_t)(v >> 8);
		buf[o++] = (uint8_t)v;
	}
	for (; i < len; i += 4) {
		uint32_t v = (uint32_t)b64_value((unsigned char)s[i]) << 18 |
			     (uint32_t)b64_value((unsigned char)s[i + 1]) << 12;

		buf[o++] = (uint8_t)(v >> 16);
		if (s[i + 2] == '=')
			break;
		v |= (uint32_t)b64_value((unsigned char)s[i + 2]) << 6;
		buf[o++] = (uint8_t)(v >> 8);
		if (s[i + 3] == '=')
			break;
		v |= (uint32_t)b64_value((unsigned char)s[i + 3]);
		buf[o++] = (uint8_t)v;
	}
	*out = buf;
	*out_len = o;
	return 0;
}

/* ---- foreign files ------------------------------------------------------ */

/* ---- directories ------------------------------------------------------- */

int rlb_natural_cmp(const char *a, const char *b)
{
	while (*a && *b) {
		if (isdigit((unsigned char)*a) && isdigit((unsigned char)*b)) {
			const char *ea = a, *eb = b;
			size_t la, lb;
			int c;

			while (*a == '0' && isdigit((unsigned char)a[1]))
				a++;
			while (*b == '0' && isdigit((unsigned char)b[1]))
				b++;
			for (ea = a; isdigit((unsigned char)*ea); ea++)
				;
			for (eb = b; isdigit((unsigned char)*eb); eb++)
				;
			la = (size_t)(ea - a);
			lb = (size_t)(eb - b);
			if (la != lb)
				return la < lb ? -1 : 1;
			c = memcmp(a, b, la);
			if (c)
				return c < 0 ? -1 : 1;
			a = ea;
			b = eb;
			continue;
		}
		if (*a != *b)
			return (unsigned char)*a < (unsigned char)*b ? -1 : 1;
		a++;
		b++;
	}
	if (*a == *b)
		return 0;
	return *a ? 1 : -1;
}

static int cmp_names(const void *a, const void *b)
{
	int c = rlb_natural_cmp(*(char *const *)a, *(char *const *)b);

	return c ? c : strcmp(*(char *const *)a, *(char *const *)b);
}

void rlb_import_free_list(char **list, size_t n)
{
	size_t i;

	if (!list)
		return;
	for (i = 0; i < n; i++)
		free(list[i]);
	free(list);
}

int rlb_import_list_dir(const char *path, const char *suffix, char ***out,
			size_t *n, struct rlb_err *err)
{
	size_t slen = strlen(suffix), plen = strlen(path), count = 0, cap = 0;
	char **list = NULL;
	struct dirent *de;
	DIR *d;
	int ret = 0;

	*out = NULL;
	*n = 0;
	d = opendir(path);
	if (!d)
		return rlb_err_errno(err, RLB_EIO, "cannot open directory '%s'", path);
	while ((errno = 0, de = readdir(d)) != NULL) {
		size_t nlen = strlen(de->d_name);
		struct stat st;
		char *full;

		if (nlen <= slen || strcmp(de->d_name + nlen - slen, suffix) != 0 ||
		    de->d_name[0] == '.')
			continue;
		full = malloc(plen + nlen + 2);
		if (!full) {
			ret = rlb_err_set(err, RLB_ENOMEM, "out of memory");
			goto out;
		}
		snprintf(full, plen + nlen + 2, "%s/%s", path, de->d_name);
		/* A *SUFFIX entry that is not a file is refused, not skipped:
		 * a dangling link would otherwise lose its data silently. */
		if (stat(full, &st) != 0) {
			ret = rlb_err_errno(err, RLB_EIO, "cannot open '%s'", full);
			free(full);
			goto out;
		}
		if (!S_ISREG(st.st_mode)) {
			ret = rlb_err_set(err, RLB_EINVAL, "'%s' is not a regular file",
					  full);
			free(full);
			goto out;
		}
		if (count == cap) {
			size_t ncap = cap ? cap * 2 : 16;
			char **nl = realloc(list, ncap * sizeof(*nl));

			if (!nl) {
				free(full);
				ret = rlb_err_set(err, RLB_ENOMEM, "out of memory");
				goto out;
			}
			list = nl;
			cap = ncap;
		}
		list[count++] = full;
	}
	if (errno != 0) {
		ret = rlb_err_errno(err, RLB_EIO, "cannot read directory '%s'", path);
		goto out;
	}
	if (count == 0) {
		ret = rlb_err_set(err, RLB_ENOTFOUND, "no *%s files in '%s'", suffix,
				  path);
		goto out;
	}
	qsort(list, count, sizeof(*list), cmp_names);
out:
	closedir(d);
	if (ret != 0) {
		rlb_import_free_list(list, count);
		return ret;
	}
	*out = list;
	*n = count;
	return 0;
}

/* ---- lines and JSON ---------------------------------------------------- */

/*
 * For a NUL byte in the first line: what the binary file seems to be
 * (a torch.save, numpy.savez or pickle file given to a JSON-lines format).
 */
static const char *binary_advice(const struct rlb_line_reader *r, size_t n)
{
	if (r->offset != 0)
		return "";
	return rlb_import_kind_advice((const uint8_t *)r->line, n);
}

const char *rlb_import_kind_advice(const uint8_t *buf, size_t len)
{
	switch (rlb_sniff(buf, len)) {
	case RLB_KIND_TRACE:
		return " (a relibra trace: capture writes traces, inspect and plan read them)";
	case RLB_KIND_PLAN:
		return " (a relibra plan: train-step reads plans)";
	case RLB_KIND_NPY:
		return " (a .npy array: --from vllm reads them)";
	case RLB_KIND_GZIP:
		return " (gzip-compressed: decompress it first)";
	case RLB_KIND_ZSTD:
		return " (zstd-compressed: decompress it first)";
	case RLB_KIND_UTF16:
		return " (UTF-16 text: convert it to UTF-8)";
	case RLB_KIND_ZIP:
		return " (a zip archive, such as a torch.save or numpy.savez file: "
		       "docs/jsonl-format.md says how to convert one)";
	case RLB_KIND_PICKLE:
		return " (a Python pickle, such as a legacy torch.save file: "
		       "docs/jsonl-format.md says how to convert one)";
	default:
		return "";
	}
}

/*
 * getline, but one that stops at the end of the chunk that holds a NUL
 * byte: a binary input, which rlb_line_next refuses, is not read on to a
 * newline that may never come (/dev/zero would take all memory).  fgets
 * does not say how much it read, so each chunk is first filled with '\n':
 * the last NUL in the chunk is the one fgets ends its bytes with.
 */
static ssize_t read_line(struct rlb_line_reader *r)
{
	size_t n = 0, chunk = 1024, got;
	char *p;

	for (;;) {
		if (r->cap - n < chunk) {
			size_t cap = r->cap ? r->cap : chunk;

			while (cap - n < chunk)
				cap *= 2;
			p = realloc(r->line, cap);
			if (!p) {
				errno = ENOMEM;
				return -1;
			}
			r->line = p;
			r->cap = cap;
		}
		p = r->line + n;
		memset(p, '\n', chunk);
		if (!fgets(p, (int)chunk, r->fp))
			return n ? (ssize_t)n : -1;
		for (got = chunk - 1; p[got] != '\0'; got--)
			;
		n += got;
		if ((got && p[got - 1] == '\n') || memchr(p, '\0', got))
			return (ssize_t)n;
		if (chunk < (1u << 20))
			chunk *= 2;
	}
}

int rlb_line_next(struct rlb_line_reader *r, struct rlb_err *err)
{
	for (;;) {
		const char *nul;
		ssize_t n;
		size_t i;

		errno = 0;
		n = read_line(r);
		if (n < 0) {
			if (ferror(r->fp))
				return rlb_err_errno(err, RLB_EIO, "cannot read '%s'",
						     r->name);
			if (errno == ENOMEM)
				return rlb_err_set(err, RLB_ENOMEM, "out of memory");
			return 0;
		}
		r->lineno++;
		r->offset = r->next_offset;
		r->next_offset += (uint64_t)n;
		nul = memchr(r->line, '\0', (size_t)n);
		if (nul)
			return rlb_err_set(err, RLB_EPARSE,
					   "%s:%" PRIu64 ":%zu: a NUL byte at byte offset %" PRIu64
					   ", expected JSON text%s",
					   r->name, r->lineno, (size_t)(nul - r->line) + 1,
					   r->offset + (uint64_t)(nul - r->line),
					   binary_advice(r, (size_t)n));
		/* jansson's message would quote the invisible mark */
		if (rlb_sniff_bom((const uint8_t *)r->line, (size_t)n))
			return rlb_err_set(err, RLB_EPARSE,
					   "%s:%" PRIu64 ":1: a UTF-8 byte order mark at byte offset %"
					   PRIu64 ", which JSON does not allow: save it without one",
					   r->name, r->lineno, r->offset);
		while (n > 0 && isspace((unsigned char)r->line[n - 1]))
			n--;
		r->line[n] = '\0';
		for (i = 0; i < (size_t)n && isspace((unsigned char)r->line[i]); i++)
			;
		if (i == (size_t)n)
			continue;
		r->len = (size_t)n;
		return 1;
	}
}

void rlb_line_release(struct rlb_line_reader *r)
{
	free(r->line);
	r->line = NULL;
	r->cap = 0;
}

int rlb_line_json(struct rlb_line_reader *r, json_t **out, struct rlb_err *err)
{
	json_error_t je;
	int line, column, byte;

	*out = json_loadb(r->line, r->len, JSON_REJECT_DUPLICATES, &je);
	if (*out)
		return 0;
	rlb_json_error_where(&je, &line, &column, &byte);
	if (column > 0)
		return rlb_err_set(err, RLB_EPARSE, "%s:%" PRIu64 ":%d: invalid JSON: %s",
				   r->name, r->lineno, column, je.text);
	return rlb_err_set(err, RLB_EPARSE, "%s:%" PRIu64 ": invalid JSON: %s",
			   r->name, r->lineno, je.text);
}

int rlb_json_opt_uint(json_t *obj, const char *key, const char *field,
		      int64_t max, int64_t *out, struct rlb_err *err)
{
	json_t *v = json_object_get(obj, key);

	*out = -1;
	if (!v || json_is_null(v))
		return 0;
	if (!json_is_integer(v) || json_integer_value(v) < 0 ||
	    json_integer_value(v) > max)
		return rlb_err_set(err, RLB_EPARSE,
				   "%s: expected an integer in [0, %" PRId64 "]",
				   field, max);
	*out = json_integer_value(v);
	return 0;
}

/* ---- dispatch ---------------------------------------------------------- */

static int open_input(const char *path, const char *name, FILE **fp,
		      struct rlb_err *err)
{
	struct stat st;

	if (strcmp(path, "-") == 0) {
		*fp = stdin;
		return 0;
	}
	if (stat(path, &st) == 0 && S_ISDIR(st.st_mode))
		return rlb_err_set(err, RLB_EINVAL, "'%s' is a directory", name);
	*fp = fopen(path, "r");
	if (!*fp)
		return rlb_err_errno(err, RLB_EIO, "cannot open '%s'", name);
	return 0;
}

static int import_megatron_path(struct rlb_importer *im, const char *path,
				struct rlb_err *err)
{
	char **list = NULL;
	FILE **fps = NULL;
	size_t n = 0, opened = 0, i;
	struct stat st;
	int ret;

	if (strcmp(path, "-") == 0 || stat(path, &st) != 0 || !S_ISDIR(st.st_mode)) {
		FILE *fp;

		ret = open_input(path, im->name, &fp, err);
		if (ret != 0)
			return ret;
		ret = rlb_import_megatron(im, &fp, &im->name, 1, err);
		if (fp != stdin)
			fclose(fp);
		return ret;
	}
	ret = rlb_import_list_dir(path, ".jsonl", &list, &n, err);
	if (ret != 0)
		return ret;
	fps = calloc(n, sizeof(*fps));
	if (!fps) {
		ret = rlb_err_set(err, RLB_ENOMEM, "out of memory");
		goto out;
	}
	for (opened = 0; opened < n; opened++) {
		fps[opened] = fopen(list[opened], "r");
		if (!fps[opened]) {
			ret = rlb_err_errno(err, RLB_EIO, "cannot open '%s'", list[opened]);
			goto out;
		}
	}
	ret = rlb_import_megatron(im, fps, (const char **)list, n, err);
out:
	for (i = 0; i < opened; i++)
		fclose(fps[i]);
	free(fps);
	rlb_import_free_list(list, n);
	return ret;
}

int rlb_import_to_sink(const struct rlb_import_opts *opts, const char *path,
		       const struct rlb_config *cfg, rlb_import_sink_fn sink,
		       void *sink_ctx, rlb_progress_fn progress,
		       void *progress_ctx, struct rlb_err *err)
{
	const char *name = strcmp(path, "-") == 0 ? "<stdin>" : path;
	struct rlb_importer im;
	FILE *fp = NULL;
	int ret;

	if ((unsigned)opts->format >= NFORMATS)
		return rlb_err_set(err, RLB_EINVAL, "unknown import format %d",
				   (int)opts->format);
	ret = rlb_importer_init(&im, opts, cfg, name, sink, sink_ctx, progress,
				progress_ctx, err);
	if (ret != 0)
		return ret;
	switch (opts->format) {
	case RLB_IMPORT_VLLM:
		if (strcmp(path, "-") == 0) {
			ret = rlb_err_set(err, RLB_EINVAL,
					  "vllm input is a .npy file or a directory, not stdin");
			break;
		}
		ret = rlb_import_vllm(&im, path, err);
		break;
	case RLB_IMPORT_MEGATRON:
		ret = import_megatron_path(&im, path, err);
		break;
	case RLB_IMPORT_SGLANG:
	case RLB_IMPORT_JSONL:
		ret = open_input(path, name, &fp, err);
		if (ret != 0)
			break;
		if (opts->format == RLB_IMPORT_SGLANG)
			ret = rlb_import_sglang(&im, fp, err);
		else
			ret = rlb_import_jsonl(&im, fp, err);
		if (fp != stdin)
			fclose(fp);
		break;
	}
	if (ret == 0 && im.sequences == 0 && im.records == 0)
		ret = rlb_err_set(err, RLB_EINVAL, "'%s' holds no records", name);
	else if (ret == 0 && im.sequences == 0)	/* e.g. only MTP layers */
		ret = rlb_err_set(err, RLB_EINVAL,
				  "'%s' holds no routing of the model's layers "
				  "(%" PRIu64 " record%s read)", name, im.records,
				  im.records == 1 ? "" : "s");
	if (ret == 0 && opts->stats) {
		opts->stats->records = im.records;
		opts->stats->sequences = im.sequences;
		opts->stats->tokens = im.tokens;
		opts->stats->recomputed = im.recomputed;
		opts->stats->unfinished = im.unfinished;
	}
	rlb_importer_release(&im);
	return ret;
}

static int writer_sink(void *ctx, const struct rlb_seq *seq, struct rlb_err *err)
{
	struct rlb_trace_writer *w = ctx;
	int ret = rlb_trace_writer_append(w, seq);

	if (ret == 0)
		return 0;
	if (rlb_trace_writer_error(w, err) == 0 || !err || !err->msg[0])
		rlb_err_set(err, ret, "cannot append to the trace: %s",
			    rlb_strerror(ret));
	return ret;
}

int rlb_import(const struct rlb_import_opts *opts, const char *path,
	       const struct rlb_config *cfg, struct rlb_trace_writer *w,
	       rlb_progress_fn progress, void *progress_ctx,
	       struct rlb_err *err)
{
	if (rlb_trace_header_check(rlb_trace_writer_header(w), cfg, err) != 0)
		return RLB_EMISMATCH;
	return rlb_import_to_sink(opts, path, cfg, writer_sink, w, progress,
				  progress_ctx, err);
}
