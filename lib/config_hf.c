/*
 * config_hf.c - a model section from a Hugging Face config.json.
 *
 * Each family's own rule says which layers are MoE and which attend
 * within a sliding window; the result is then fitted to relibra's layout
 * (first dense layers, then blocks of a period with one MoE layer at an
 * offset) and attention pattern (full when i + 1 is a multiple of a
 * period).  Nemotron-H gives its layers one by one, which a layer
 * pattern takes as they are.  A model relibra cannot describe is an
 * error, never a guess.
 */
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "clocale.h"
#include "config_hf.h"
#include "config_impl.h"
#include "sniff.h"
#include "trace.h"
#include "util.h"

/* The relibra key of each RLB_HF_* row, in the order a preset lists them. */
static const char *const key_names[RLB_HF_KEYS] = {
	"experts", "topk", "hidden", "expert_ffn", "moe_latent", "moe_layers",
	"first_dense_layers", "moe_layer_period", "moe_layer_offset", "layer_pattern", "dense_ffn",
	"shared_experts", "shared_expert_ffn", "gated_ffn", "expert_groups", "topk_groups",
	"q_heads", "kv_heads", "head_dim", "kv_lora_rank", "q_lora_rank", "qk_rope_head_dim",
	"v_head_dim", "attention_output_gate", "attention_window", "attention_chunk",
	"full_attention_period", "linear_key_heads", "linear_value_heads",
	"linear_key_head_dim", "linear_value_head_dim", "mamba_heads", "mamba_head_dim",
	"mamba_state", "mamba_groups",
};

struct reader {
	const char *path;
	json_t *obj;		/* the text model's fields (text_config when there is one) */
	struct rlb_hf_model *hm;
	struct rlb_err *err;
};

/* The int (or bool) of key KEY; NULL for the layer pattern, a string. */
static int *field_of(struct rlb_model_config *m, int key)
{
	switch (key) {
	case RLB_HF_EXPERTS: return &m->experts;
	case RLB_HF_TOPK: return &m->topk;
	case RLB_HF_HIDDEN: return &m->hidden;
	case RLB_HF_EXPERT_FFN: return &m->expert_ffn;
	case RLB_HF_MOE_LATENT: return &m->moe_latent;
	case RLB_HF_MOE_LAYERS: return &m->moe_layers;
	case RLB_HF_FIRST_DENSE: return &m->first_dense_layers;
	case RLB_HF_PERIOD: return &m->moe_layer_period;
	case RLB_HF_OFFSET: return &m->moe_layer_offset;
	case RLB_HF_DENSE_FFN: return &m->dense_ffn;
	case RLB_HF_SHARED: return &m->shared_experts;
	case RLB_HF_SHARED_FFN: return &m->shared_expert_ffn;
	case RLB_HF_GATED: return &m->gated_ffn;
	case RLB_HF_GROUPS: return &m->expert_groups;
	case RLB_HF_TOPK_GROUPS: return &m->topk_groups;
	case RLB_HF_Q_HEADS: return &m->q_heads;
	case RLB_HF_KV_HEADS: return &m->kv_heads;
	case RLB_HF_HEAD_DIM: return &m->head_dim;
	case RLB_HF_KV_LORA: return &m->kv_lora_rank;
	case RLB_HF_Q_LORA: return &m->q_lora_rank;
	case RLB_HF_ROPE_DIM: return &m->qk_rope_head_dim;
	case RLB_HF_V_DIM: return &m->v_head_dim;
	case RLB_HF_GATE: return &m->attention_output_gate;
	case RLB_HF_WINDOW: return &m->attention_window;
	case RLB_HF_CHUNK: return &m->attention_chunk;
	case RLB_HF_FULL_PERIOD: return &m->full_attention_period;
	case RLB_HF_LIN_KEY_HEADS: return &m->linear_key_heads;
	case RLB_HF_LIN_VALUE_HEADS: return &m->linear_value_heads;
	case RLB_HF_LIN_KEY_DIM: return &m->linear_key_head_dim;
	case RLB_HF_LIN_VALUE_DIM: return &m->linear_value_head_dim;
	case RLB_HF_MAMBA_HEADS: return &m->mamba_heads;
	case RLB_HF_MAMBA_HEAD_DIM: return &m->mamba_head_dim;
	case RLB_HF_MAMBA_STATE: return &m->mamba_state;
	case RLB_HF_MAMBA_GROUPS: return &m->mamba_groups;
	default: return NULL;
	}
}

/*
 * Set relibra key KEY to V, noting the config.json fields it came from;
 * a key never set is not written.
 */
static void set(struct reader *r, int key, int v, const char *from)
{
	int *field = field_of(&r->hm->model, key);

	if (field)
		*field = v;
	snprintf(r->hm->from[key], sizeof(r->hm->from[key]), "%s", from);
}

static int is_null(const json_t *v)
{
	return !v || json_is_null(v);
}

/*
 * Field NAME as a non-negative int: 1 when given, 0 when absent or null,
 * RLB_ECONFIG when of another type or out of range.
 */
static int get_int(struct reader *r, const char *name, int *out)
{
	json_t *v = json_object_get(r->obj, name);
	double d;

	if (is_null(v))
		return 0;
	if (json_is_integer(v)) {
		json_int_t x = json_integer_value(v);

		if (x >= 0 && x <= INT_MAX) {
			*out = (int)x;
			return 1;
		}
	} else if (json_is_real(v)) {
		d = json_real_value(v);
		if (d >= 0 && d <= INT_MAX && d == (double)(int)d) {
			*out = (int)d;
			return 1;
		}
	}
	return rlb_err_set(r->err, RLB_ECONFIG, "%s: '%s' is not a non-negative integer",
			   r->path, name);
}

/* The first of NAMES (NULL-terminated) given: its value and name, or 0. */
static int get_first(struct reader *r, const char *const *names, int *out,
		     const char **which)
{
	int ret;

	for (; *names; names++) {
		ret = get_int(r, *names, out);
		if (ret) {
			*which = *names;
			return ret;
		}
	}
	return 0;
}

static int required(struct reader *r, const char *const *names, int *out, const char **which)
{
	char list[256];
	size_t n = 0;
	int ret = get_first(r, names, out, which);

	if (ret)
		return ret;
	for (; *names && n < sizeof(list); names++)
		n += (size_t)snprintf(list + n, sizeof(list) - n, "%s'%s'", n ? " or " : "", *names);
	return rlb_err_set(r->err, RLB_ECONFIG, "%s: no %s", r->path, list);
}

/* A JSON array of strings or integers, as FIELD; NULL with no error when absent. */
static json_t *get_array(struct reader *r, const char *name, int *ret)
{
	json_t *v = json_object_get(r->obj, name);

	*ret = 0;
	if (is_null(v))
		return NULL;
	if (!json_is_array(v))
		*ret = rlb_err_set(r->err, RLB_ECONFIG, "%s: '%s' is not an array", r->path, name);
	return json_is_array(v) ? v : NULL;
}

/* ------------------------------------------------------------------ */
/* Which layers are MoE, by each family's rule.                        */

/* moe[i] = VALUE for every layer index i of LIST (field NAME), each in [0, L). */
static int mark_layers(struct reader *r, json_t *list, const char *name, int L,
		       unsigned char *moe, unsigned char value)
{
	json_t *item;
	size_t j;

	json_array_foreach(list, j, item) {
		json_int_t x = json_is_integer(item) ? json_integer_value(item) : -1;

		if (x < 0 || x >= L)
			return rlb_err_set(r->err, RLB_ECONFIG,
					   "%s: '%s'[%zu] is not a layer index in [0, %d)",
					   r->path, name, j, L);
		moe[x] = value;
	}
	return 0;
}

/*
 * moe[i] from a per-layer LIST, field NAME: `mlp_layer_types`, one "dense"
 * or "sparse" per layer, which transformers writes for the families it
 * gives one (it decides over first_k_dense_replace and the like when both
 * are there), or a `moe_layer_freq` list, Megatron-LM's --moe-layer-freq
 * pattern, one 1 (MoE) or 0 (dense) per layer.
 */
static int mark_per_layer(struct reader *r, json_t *list, const char *name, int L,
			  unsigned char *moe)
{
	int words = !strcmp(name, "mlp_layer_types");
	json_t *t;
	size_t i;

	if (json_array_size(list) != (size_t)L)
		return rlb_err_set(r->err, RLB_ECONFIG, "%s: '%s' has %zu entries for %d layers",
				   r->path, name, json_array_size(list), L);
	json_array_foreach(list, i, t) {
		const char *s = json_is_string(t) ? json_string_value(t) : "";
		json_int_t x = json_is_integer(t) ? json_integer_value(t) : -1;

		if (words)
			x = !strcmp(s, "sparse") ? 1 : !strcmp(s, "dense") ? 0 : -1;
		if (x != 0 && x != 1)
			return rlb_err_set(r->err, RLB_ECONFIG, "%s: '%s'[%zu] is not %s", r->path,
					   name, i, words ? "'dense' or 'sparse'" :
					   "0 (dense) or 1 (MoE)");
		moe[i] = (unsigned char)x;
	}
	return 0;
}

/*
 * ERNIE 4.5's `moe_layer_end_index` into *END: absent, null or -1 mean the
 * last of the L layers; 0 when read, RLB_ECONFIG otherwise.
 */
static int get_end_index(struct reader *r, int L, int *end)
{
	json_t *v = json_object_get(r->obj, "moe_layer_end_index");

	*end = L - 1;
	if (json_is_integer(v) && json_integer_value(v) == -1)
		return 0;
	return get_int(r, "moe_layer_end_index", end) < 0 ? RLB_ECONFIG : 0;
}

/*
 * moe[i] for the L hidden layers: `mlp_layer_types` or a `moe_layer_freq`
 * list (above); an explicit `moe_layers` list (Llama 4);
 * `moe_layer_start_index` with `moe_layer_end_index` and
 * `moe_layer_interval` (ERNIE 4.5: MoE where start <= i <= end and i + 1
 * is a multiple of the interval);
 * `first_k_dense_replace` with `moe_layer_freq` (DeepSeek, Kimi, GLM-4.5:
 * MoE where i >= k and i is a multiple of the frequency);
 * `decoder_sparse_step` with `mlp_only_layers` (Qwen MoE: MoE where i + 1
 * is a multiple of the step, outside the list); `interleave_moe_layer_step`
 * (Llama 4) or `moe_layer_frequency` (Arctic), i + 1 a multiple of it;
 * else every layer.  RULE receives the fields used.
 */
static int moe_layers_of(struct reader *r, int L, unsigned char *moe, char *rule, size_t size)
{
	static const char *const n_step[] = {
		"decoder_sparse_step", "interleave_moe_layer_step", "moe_layer_frequency", NULL
	};
	const char *which = NULL;
	json_t *list;
	int i, k = 0, freq = 1, step = 1, ret;

	memset(moe, 0, (size_t)L);
	list = get_array(r, "mlp_layer_types", &ret);
	if (ret < 0)
		return ret;
	if (list) {
		snprintf(rule, size, "mlp_layer_types");
		return mark_per_layer(r, list, "mlp_layer_types", L, moe);
	}
	list = json_object_get(r->obj, "moe_layer_freq");
	if (json_is_array(list)) {
		snprintf(rule, size, "moe_layer_freq");
		return mark_per_layer(r, list, "moe_layer_freq", L, moe);
	}
	list = get_array(r, "moe_layers", &ret);
	if (ret < 0)
		return ret;
	if (list) {
		snprintf(rule, size, "moe_layers");
		return mark_layers(r, list, "moe_layers", L, moe, 1);
	}
	if (json_object_get(r->obj, "moe_layer_start_index")) {
		int start = 0, end, every = 1;

		if ((ret = get_int(r, "moe_layer_start_index", &start)) < 0 ||
		    (ret = get_end_index(r, L, &end)) < 0 ||
		    (ret = get_int(r, "moe_layer_interval", &every)) < 0)
			return ret;
		if (every < 1)
			return rlb_err_set(r->err, RLB_ECONFIG, "%s: 'moe_layer_interval' is 0", r->path);
		for (i = start; i <= end && i < L; i++)
			moe[i] = (i + 1) % every == 0;
		snprintf(rule, size, "moe_layer_start_index, moe_layer_end_index, moe_layer_interval");
		return 0;
	}
	if ((ret = get_int(r, "first_k_dense_replace", &k)) < 0 ||
	    (ret = get_int(r, "moe_layer_freq", &freq)) < 0)
		return ret;
	if (json_object_get(r->obj, "first_k_dense_replace")) {
		if (freq < 1)
			return rlb_err_set(r->err, RLB_ECONFIG, "%s: 'moe_layer_freq' is 0", r->path);
		for (i = k; i < L; i++)
			moe[i] = i % freq == 0;
		snprintf(rule, size, "first_k_dense_replace%s",
			 json_object_get(r->obj, "moe_layer_freq") ? ", moe_layer_freq" : "");
		return 0;
	}
	if ((ret = get_first(r, n_step, &step, &which)) < 0)
		return ret;
	if (step < 1)
		return rlb_err_set(r->err, RLB_ECONFIG, "%s: the MoE layer step is 0", r->path);
	for (i = 0; i < L; i++)
		moe[i] = (i + 1) % step == 0;
	snprintf(rule, size, "%s", ret ? which : "all layers");
	list = get_array(r, "mlp_only_layers", &ret);
	if (ret < 0 || (ret = mark_layers(r, list, "mlp_only_layers", L, moe, 0)) < 0)
		return ret;
	if (list && json_array_size(list))
		snprintf(rule + strlen(rule), size - strlen(rule), ", mlp_only_layers");
	return 0;
}

/*
 * Fit moe[0..L) to relibra's layout: F first dense layers, then M blocks
 * of P layers whose layer O is MoE, F + M * P = L.
 */
static int fit_layout(struct reader *r, const unsigned char *moe, int L, const char *rule)
{
	int i, first = -1, second = -1, M = 0, P, F, O;
	char list[160], from[96];
	size_t n = 0;

	for (i = 0; i < L; i++)
		if (moe[i]) {
			if (first < 0)
				first = i;
			else if (second < 0)
				second = i;
			M++;
		}
	if (!M)
		return rlb_err_set(r->err, RLB_ECONFIG, "%s: no MoE layer among the %d layers (%s)",
				   r->path, L, rule);
	P = M > 1 ? second - first : L - first;
	F = L - M * P;
	O = first - F;
	for (i = 0; F >= 0 && O >= 0 && O < P && i < L; i++)
		if (moe[i] != (i >= F && (i - F) % P == O))
			break;
	if (F < 0 || O < 0 || O >= P || i < L) {
		for (i = 0; i < L && n + 16 < sizeof(list); i++)
			if (moe[i])
				n += (size_t)snprintf(list + n, sizeof(list) - n, "%s%d", n ? ", " : "", i);
		if (i < L)
			snprintf(list + n, sizeof(list) - n, ", ...");
		return rlb_err_set(r->err, RLB_ECONFIG,
				   "%s: the MoE layers (%s: %s of %d) do not repeat with one period "
				   "after the first dense layers, which relibra.yaml(5) cannot describe",
				   r->path, rule, list, L);
	}
	snprintf(from, sizeof(from), "num_hidden_layers %d, %s", L, rule);
	set(r, RLB_HF_MOE_LAYERS, M, from);
	set(r, RLB_HF_FIRST_DENSE, F, from);
	set(r, RLB_HF_PERIOD, P, from);
	set(r, RLB_HF_OFFSET, O, from);
	return 0;
}

/* ------------------------------------------------------------------ */
/* How each layer attends.                                             */

static const char *const kind_names[RLB_ATT_KINDS] = {
	"full_attention", "sliding_attention", "linear_attention", "chunked_attention",
};

/*
 * kinds[i] (RLB_ATT_*) from `layer_types`, or NULL with no error when the
 * config has none.
 */
static int kinds_from_layer_types(struct reader *r, int L, unsigned char *kinds, int *given)
{
	json_t *types, *t;
	int ret, k;
	size_t i;

	*given = 0;
	types = get_array(r, "layer_types", &ret);
	if (ret < 0 || !types)
		return ret;
	if (json_array_size(types) != (size_t)L)
		return rlb_err_set(r->err, RLB_ECONFIG,
				   "%s: 'layer_types' has %zu entries for %d layers",
				   r->path, json_array_size(types), L);
	json_array_foreach(types, i, t) {
		const char *s = json_is_string(t) ? json_string_value(t) : "";

		for (k = 0; k < RLB_ATT_KINDS && strcmp(s, kind_names[k]); k++)
			;
		if (k == RLB_ATT_KINDS)
			return rlb_err_set(r->err, RLB_ECONFIG,
					   "%s: 'layer_types'[%zu] is %s%s%s; relibra models "
					   "full_attention, sliding_attention, chunked_attention and "
					   "linear_attention layers only", r->path, i,
					   json_is_string(t) ? "'" : "",
					   json_is_string(t) ? s : "not a string",
					   json_is_string(t) ? "'" : "");
		kinds[i] = (unsigned char)k;
	}
	*given = 1;
	return 0;
}

/*
 * The sliding-window layers of a config without `layer_types`:
 * `sliding_window` on every layer unless `use_sliding_window` is false
 * (default false for Qwen MoE), dots.llm1's from `max_window_layers` on,
 * or but every `sliding_window_pattern`-th.
 */
static int windows_by_default(struct reader *r, int L, unsigned char *kinds, char *rule,
			      size_t size)
{
	json_t *use = json_object_get(r->obj, "use_sliding_window");
	int W = 0, pattern = 0, ret;
	size_t i;

	if ((ret = get_int(r, "sliding_window", &W)) < 0)
		return ret;
	if (W < 1 || (use && json_is_false(use)))
		return 0;
	/* Qwen MoE configs default use_sliding_window to false */
	if (!use && (!strcmp(r->hm->model_type, "qwen2_moe") ||
		     !strcmp(r->hm->model_type, "qwen3_moe")))
		return 0;
	if ((ret = get_int(r, "max_window_layers", &pattern)) < 0)
		return ret;
	if (ret && !strcmp(r->hm->model_type, "dots1")) {
		/* dots.llm1: the window on layers max_window_layers and later */
		for (i = 0; i < (size_t)L; i++)
			kinds[i] = i >= (size_t)pattern ? RLB_ATT_WINDOW : RLB_ATT_FULL;
		snprintf(rule, size, "max_window_layers");
		return 0;
	}
	if (ret && pattern < L)
		return rlb_err_set(r->err, RLB_ECONFIG, "%s: 'max_window_layers' %d of %d layers "
				   "without 'layer_types': which layers attend within the window "
				   "is the family's (and transformers version's) own rule; give "
				   "'layer_types'", r->path, pattern, L);
	pattern = 0;
	if ((ret = get_int(r, "sliding_window_pattern", &pattern)) < 0)
		return ret;
	for (i = 0; i < (size_t)L; i++)
		kinds[i] = pattern > 0 && (i + 1) % (size_t)pattern == 0 ? RLB_ATT_FULL :
			   RLB_ATT_WINDOW;
	snprintf(rule, size, "sliding_window%s", pattern ? "_pattern" : "");
	return 0;
}

/*
 * kinds[i] for the L layers: `layer_types`; else the family's default:
 * Qwen3-Next linear attention but every `full_attention_interval`-th
 * layer (4), Llama 4 chunked attention on its RoPE layers
 * (`no_rope_layers` 1, else but every `no_rope_layer_interval`-th, 4)
 * when `attention_chunk_size` is set, the sliding-window rules above;
 * else full attention.  MiniMax's lightning attention is refused.
 */
static int kinds_of(struct reader *r, int L, unsigned char *kinds, char *rule, size_t size)
{
	const char *type = r->hm->model_type;
	json_t *list = json_object_get(r->obj, "attn_type_list"), *item;
	int ret, given, step, chunk = 0;
	size_t i;

	memset(kinds, RLB_ATT_FULL, (size_t)L);
	snprintf(rule, size, "layer_types");
	if ((ret = kinds_from_layer_types(r, L, kinds, &given)) < 0 || given)
		return ret;
	if (json_is_array(list) || !strcmp(type, "minimax")) {
		json_array_foreach(list, i, item)
			if (!json_is_integer(item) || json_integer_value(item) != 1)
				break;
		if (!json_is_array(list) || i < json_array_size(list))
			return rlb_err_set(r->err, RLB_ECONFIG, "%s: MiniMax's lightning attention "
					   "('%s'): relibra's cost model has no term for it",
					   r->path, json_is_array(list) ? "attn_type_list" :
					   "model_type");
		return 0;	/* every layer full (MiniMax-M2) */
	}
	if (json_object_get(r->obj, "full_attention_interval") || !strcmp(type, "qwen3_next")) {
		step = 4;
		if ((ret = get_int(r, "full_attention_interval", &step)) < 0)
			return ret;
		if (step < 1)
			return rlb_err_set(r->err, RLB_ECONFIG, "%s: 'full_attention_interval' is 0",
					   r->path);
		for (i = 0; i < (size_t)L; i++)
			kinds[i] = (i + 1) % (size_t)step ? RLB_ATT_LINEAR : RLB_ATT_FULL;
		snprintf(rule, size, "full_attention_interval");
		return 0;
	}
	if ((ret = get_int(r, "attention_chunk_size", &chunk)) < 0)
		return ret;
	if (chunk > 0 && !strncmp(type, "llama4", 6)) {
		json_t *nope = json_object_get(r->obj, "no_rope_layers");

		step = 4;
		if ((ret = get_int(r, "no_rope_layer_interval", &step)) < 0)
			return ret;
		if (json_is_array(nope) && json_array_size(nope)) {
			if (json_array_size(nope) < (size_t)L)
				return rlb_err_set(r->err, RLB_ECONFIG, "%s: 'no_rope_layers' has "
						   "%zu entries for %d layers", r->path,
						   json_array_size(nope), L);
			for (i = 0; i < (size_t)L; i++)
				kinds[i] = json_is_true(json_array_get(nope, i)) ||
					   json_integer_value(json_array_get(nope, i)) ?
					   RLB_ATT_CHUNK : RLB_ATT_FULL;
			snprintf(rule, size, "no_rope_layers");
			return 0;
		}
		if (step < 1)
			return rlb_err_set(r->err, RLB_ECONFIG, "%s: 'no_rope_layer_interval' is 0",
					   r->path);
		for (i = 0; i < (size_t)L; i++)
			kinds[i] = (i + 1) % (size_t)step ? RLB_ATT_CHUNK : RLB_ATT_FULL;
		snprintf(rule, size, "no_rope_layer_interval");
		return 0;
	}
	return windows_by_default(r, L, kinds, rule, size);
}

/*
 * Fit kinds[0..L) to relibra's pattern: one kind besides full attention,
 * full where i + 1 is a multiple of P (P 0: nowhere), and set the keys
 * of that kind from the config's fields.
 */
static int fit_kinds(struct reader *r, const unsigned char *kinds, int L, const char *rule)
{
	static const char *const lin_fields[4] = {
		"linear_num_key_heads", "linear_num_value_heads", "linear_key_head_dim",
		"linear_value_head_dim",
	};
	int P, i, other = RLB_ATT_FULL, v, ret;

	for (i = 0; i < L; i++) {
		if (kinds[i] == RLB_ATT_FULL)
			continue;
		if (other != RLB_ATT_FULL && kinds[i] != other)
			return rlb_err_set(r->err, RLB_ECONFIG, "%s: '%s' mixes %s and %s layers; "
					   "relibra models one kind besides full attention",
					   r->path, rule, kind_names[other], kind_names[kinds[i]]);
		other = kinds[i];
	}
	for (P = 0; P <= L; P++) {
		for (i = 0; i < L; i++)
			if ((kinds[i] == RLB_ATT_FULL) != (P > 0 && (i + 1) % P == 0))
				break;
		if (i == L)
			break;
	}
	if (other != RLB_ATT_FULL && P > L)
		return rlb_err_set(r->err, RLB_ECONFIG,
				   "%s: the %s layers (%s) do not leave every P-th layer full for "
				   "any P, which relibra.yaml(5) cannot describe", r->path,
				   kind_names[other], rule);
	for (i = RLB_HF_WINDOW; i <= RLB_HF_LIN_VALUE_DIM; i++)
		set(r, i, 0, other == RLB_ATT_FULL ? "every layer full attention" :
		    "not this model's kind");
	if (other == RLB_ATT_FULL)
		return 0;
	set(r, RLB_HF_FULL_PERIOD, P, rule);
	if (other == RLB_ATT_WINDOW || other == RLB_ATT_CHUNK) {
		const char *field = other == RLB_ATT_WINDOW ? "sliding_window" : "attention_chunk_size";

		v = 0;
		if ((ret = get_int(r, field, &v)) < 0)
			return ret;
		if (v < 1)
			return rlb_err_set(r->err, RLB_ECONFIG, "%s: %s layers but '%s' is not a "
					   "positive integer", r->path, kind_names[other], field);
		set(r, other == RLB_ATT_WINDOW ? RLB_HF_WINDOW : RLB_HF_CHUNK, v, field);
		return 0;
	}
	for (i = 0; i < 4; i++) {
		v = 0;
		if ((ret = get_int(r, lin_fields[i], &v)) < 0)
			return ret;
		if (v < 1)
			return rlb_err_set(r->err, RLB_ECONFIG, "%s: linear_attention layers but "
					   "'%s' is not a positive integer", r->path, lin_fields[i]);
		set(r, RLB_HF_LIN_KEY_HEADS + i, v, lin_fields[i]);
	}
	return 0;
}

/* ------------------------------------------------------------------ */
/* Nemotron-H: one Mamba-2, attention, MLP or MoE block per layer.     */

/* The pattern letter of each layers_block_type name, old and new. */
static const struct {
	const char *name;
	char letter;
} block_names[] = {
	{ "moe", 'E' }, { "mamba", 'M' }, { "linear_attention", 'M' },
	{ "attention", '*' }, { "full_attention", '*' }, { "mlp", '-' },
};

/* A pattern of N layers must fit model.layer_pattern and be no empty one. */
static int check_layer_count(struct reader *r, const char *field, size_t n)
{
	if (n == 0)
		return rlb_err_set(r->err, RLB_ECONFIG, "%s: '%s' is empty", r->path, field);
	if (n >= RLB_LAYER_PATTERN_MAX)
		return rlb_err_set(r->err, RLB_ECONFIG, "%s: '%s' has %zu layers, more than "
				   "relibra's %d", r->path, field, n, RLB_LAYER_PATTERN_MAX - 1);
	return 0;
}

/* PAT (RLB_LAYER_PATTERN_MAX bytes) from LIST, field NAME: a block type per layer. */
static int pattern_of_list(struct reader *r, json_t *list, const char *name, char *pat)
{
	size_t i, k, n = sizeof(block_names) / sizeof(block_names[0]);
	json_t *t;
	int ret;

	if ((ret = check_layer_count(r, name, json_array_size(list))) < 0)
		return ret;
	json_array_foreach(list, i, t) {
		const char *s = json_is_string(t) ? json_string_value(t) : "";

		for (k = 0; k < n && strcmp(s, block_names[k].name); k++)
			;
		if (k == n || strlen(s) != json_string_length(t))
			return rlb_err_set(r->err, RLB_ECONFIG, "%s: '%s'[%zu] is not 'mamba', "
					   "'attention', 'mlp' or 'moe' (or 'linear_attention', "
					   "'full_attention')", r->path, name, i);
		pat[i] = block_names[k].letter;
	}
	pat[i] = '\0';
	return 0;
}

/* PAT (RLB_LAYER_PATTERN_MAX bytes) from the string V, hybrid_override_pattern. */
static int pattern_of_string(struct reader *r, json_t *v, char *pat)
{
	const char *s;
	long bad, moe;
	size_t n;
	int ret;

	if (!json_is_string(v))
		return rlb_err_set(r->err, RLB_ECONFIG, "%s: 'hybrid_override_pattern' is not a "
				   "string", r->path);
	s = json_string_value(v);
	n = json_string_length(v);
	if ((ret = check_layer_count(r, "hybrid_override_pattern", n)) < 0)
		return ret;
	bad = rlb_layer_pattern_scan(s, n, &moe);
	if (bad >= 0) {
		unsigned char c = (unsigned char)s[bad];

		return rlb_err_set(r->err, RLB_ECONFIG, c >= 0x20 && c < 0x7f ?
			"%s: 'hybrid_override_pattern' has '%c' at layer %ld "
			"(expected E, M, * or -)" :
			"%s: 'hybrid_override_pattern' has byte 0x%02x at layer %ld "
			"(expected E, M, * or -)", r->path, c, bad);
	}
	memcpy(pat, s, n + 1);
	return 0;
}

/*
 * model.layer_pattern from `layers_block_type` (`layer_types` to
 * transformers, which writes the list now) or the older
 * `hybrid_override_pattern`; with both they must agree.  FIELD receives
 * the field read.
 */
static int read_pattern(struct reader *r, const char **field)
{
	static const char *const lists[] = { "layers_block_type", "layer_types" };
	char *pat = r->hm->model.layer_pattern, other[RLB_LAYER_PATTERN_MAX];
	json_t *str = json_object_get(r->obj, "hybrid_override_pattern"), *list = NULL;
	size_t i;
	int ret;

	for (i = 0; i < 2 && !list; i++) {
		list = get_array(r, lists[i], &ret);
		if (ret < 0)
			return ret;
		*field = lists[i];
	}
	if (list && (ret = pattern_of_list(r, list, *field, pat)) < 0)
		return ret;
	if (is_null(str)) {
		if (!list)
			return rlb_err_set(r->err, RLB_ECONFIG, "%s: a Nemotron-H model "
					   "without 'hybrid_override_pattern' or "
					   "'layers_block_type'", r->path);
		return 0;
	}
	if ((ret = pattern_of_string(r, str, list ? other : pat)) < 0)
		return ret;
	if (list && strcmp(pat, other))
		return rlb_err_set(r->err, RLB_ECONFIG, "%s: '%s' and 'hybrid_override_pattern' "
				   "give different layers", r->path, *field);
	if (!list)
		*field = "hybrid_override_pattern";
	return 0;
}

/*
 * What a Nemotron-H config may hold that relibra's model section cannot
 * say: per-layer block_configs (the Puzzle models), windowed attention
 * layers.
 */
static int refuse_nemotron_h(struct reader *r)
{
	json_t *blocks = json_object_get(r->obj, "block_configs");
	int v = 0, ret;

	if (!is_null(blocks) && (!json_is_array(blocks) || json_array_size(blocks)))
		return rlb_err_set(r->err, RLB_ECONFIG, "%s: layers of their own shapes "
				   "('block_configs', a Nemotron-H Puzzle model): relibra's MoE "
				   "layers share one shape", r->path);
	if ((ret = get_int(r, "sliding_window", &v)) < 0)
		return ret;
	if (v)
		return rlb_err_set(r->err, RLB_ECONFIG, "%s: 'sliding_window' %d with a layer "
				   "pattern, whose attention layers relibra models in full",
				   r->path, v);
	return 0;
}

/* The Mamba-2 keys, each from its field (n_groups's older name mamba_n_groups). */
static int read_mamba(struct reader *r)
{
	static const struct {
		int key;
		const char *const names[3];
	} f[] = {
		{ RLB_HF_MAMBA_HEADS, { "mamba_num_heads", NULL } },
		{ RLB_HF_MAMBA_HEAD_DIM, { "mamba_head_dim", NULL } },
		{ RLB_HF_MAMBA_STATE, { "ssm_state_size", NULL } },
		{ RLB_HF_MAMBA_GROUPS, { "n_groups", "mamba_n_groups", NULL } },
	};
	const char *which = NULL;
	size_t i;
	int v, ret;

	for (i = 0; i < sizeof(f) / sizeof(f[0]); i++) {
		if ((ret = required(r, f[i].names, &v, &which)) < 0)
			return ret;
		if (v < 1)
			return rlb_err_set(r->err, RLB_ECONFIG, "%s: Mamba-2 layers but '%s' is 0",
					   r->path, which);
		set(r, f[i].key, v, which);
	}
	return 0;
}

/*
 * The layers of a Nemotron-H model: its pattern, MoE layers ('E'), the
 * width of its MLP layers ('-'), its Mamba-2 mixers ('M').  Its MLPs and
 * experts have up and down projections only, whatever mlp_hidden_act
 * (relu2, squared ReLU, in the published models).
 */
static int read_hybrid(struct reader *r)
{
	static const char *const n_dense[] = { "intermediate_size", NULL };
	const char *field = NULL, *which = NULL, *pat = r->hm->model.layer_pattern;
	json_t *act = json_object_get(r->obj, "mlp_hidden_act");
	int L = 0, moe = 0, mlp = 0, mamba = 0, v, ret;
	char from[96];
	size_t i;

	if ((ret = refuse_nemotron_h(r)) < 0 || (ret = read_pattern(r, &field)) < 0)
		return ret;
	if (strcmp(r->hm->from[RLB_HF_EXPERT_FFN], "moe_intermediate_size"))
		return rlb_err_set(r->err, RLB_ECONFIG, "%s: no 'moe_intermediate_size' (a "
				   "Nemotron-H model's 'intermediate_size' is its MLP layers')",
				   r->path);
	if ((ret = get_int(r, "num_hidden_layers", &L)) < 0)
		return ret;
	if (ret && (size_t)L != strlen(pat))
		return rlb_err_set(r->err, RLB_ECONFIG, "%s: '%s' has %zu layers, "
				   "'num_hidden_layers' %d", r->path, field, strlen(pat), L);
	for (i = 0; pat[i]; i++) {
		moe += pat[i] == 'E';
		mlp += pat[i] == '-';
		mamba += pat[i] == 'M';
	}
	if (!moe)
		return rlb_err_set(r->err, RLB_ECONFIG, "%s: no MoE layer ('E') in '%s': "
				   "relibra places the experts of MoE models", r->path, field);
	snprintf(r->hm->from[RLB_HF_PATTERN], sizeof(r->hm->from[0]), "%s", field);
	snprintf(from, sizeof(from), "%s: its %s layers", field,
		 strcmp(field, "hybrid_override_pattern") ? "moe" : "'E'");
	set(r, RLB_HF_MOE_LAYERS, moe, from);
	if (mlp) {
		if ((ret = required(r, n_dense, &v, &which)) < 0)
			return ret;
		set(r, RLB_HF_DENSE_FFN, v, "intermediate_size");
	} else {
		set(r, RLB_HF_DENSE_FFN, 0, "no MLP layers ('-')");
	}
	snprintf(from, sizeof(from), "nemotron_h: up and down projections%s%s%s",
		 json_is_string(act) ? " (mlp_hidden_act " : "",
		 json_is_string(act) ? json_string_value(act) : "", json_is_string(act) ? ")" : "");
	set(r, RLB_HF_GATED, 0, from);
	return mamba ? read_mamba(r) : 0;
}

/* Nemotron-H, by model_type or by its pattern's field. */
static int is_nemotron_h(const struct reader *r)
{
	return !strncmp(r->hm->model_type, "nemotron_h", 10) ||
	       !is_null(json_object_get(r->obj, "hybrid_override_pattern"));
}

/* ------------------------------------------------------------------ */
/* The model section.                                                  */

/*
 * The layers of a model whose every layer attends and then has an FFN:
 * which are MoE, fitted to the periodic layout, and the dense layers' FFN
 * width (intermediate_size beside a separate expert width).
 */
static int read_decoder_layers(struct reader *r, int L)
{
	static const char *const n_dense[] = { "intermediate_size_mlp", "intermediate_size", NULL };
	struct rlb_model_config *m = &r->hm->model;
	unsigned char *moe = malloc((size_t)L);
	const char *which = NULL;
	char rule[96] = "";
	int v = 0, ret;

	if (!moe)
		return rlb_err_set(r->err, RLB_ENOMEM, "out of memory");
	if ((ret = moe_layers_of(r, L, moe, rule, sizeof(rule))) < 0 ||
	    (ret = fit_layout(r, moe, L, rule)) < 0)
		goto out;
	ret = 0;
	if (!m->first_dense_layers && m->moe_layer_period <= 1) {
		set(r, RLB_HF_DENSE_FFN, 0, "no dense layers");
		goto out;
	}
	/* Arctic's dense layers are as wide as its experts */
	if (strcmp(r->hm->from[RLB_HF_EXPERT_FFN], "moe_intermediate_size") &&
	    !json_object_get(r->obj, "intermediate_size_mlp") &&
	    strcmp(r->hm->model_type, "arctic")) {
		ret = rlb_err_set(r->err, RLB_ECONFIG, "%s: dense layers, but no FFN width "
				  "of theirs ('intermediate_size_mlp', or 'intermediate_size' "
				  "beside 'moe_intermediate_size')", r->path);
		goto out;
	}
	if ((ret = required(r, n_dense, &v, &which)) < 0)
		goto out;
	set(r, RLB_HF_DENSE_FFN, v, which);
	ret = 0;
out:
	free(moe);
	return ret;
}

/*
 * Shared experts: fused n_shared_experts (Ling/Bailing call it
 * num_shared_experts, ERNIE 4.5 moe_num_shared_experts) of the expert
 * width, or of
 * moe_shared_expert_intermediate_size where that is given (Nemotron-H,
 * whose default is one); else one of shared_expert_intermediate_size
 * (Qwen MoE) or shared_intermediate_size (Granite), 0 for none; Arctic's
 * residual MLP (use_residual), as wide as the model; Llama 4's one.
 */
static int read_shared(struct reader *r)
{
	static const char *const n_shared[] = {
		"n_shared_experts", "num_shared_experts", "moe_num_shared_experts", NULL
	};
	static const char *const n_width[] = {
		"shared_expert_intermediate_size", "shared_intermediate_size", NULL
	};
	const char *which = NULL, *width_of = "moe_intermediate_size";
	int shared = 0, width = r->hm->model.expert_ffn, given, v = 0, ret;
	char from[96];

	if ((given = get_first(r, n_shared, &shared, &which)) < 0 ||
	    (ret = get_int(r, "moe_shared_expert_intermediate_size", &v)) < 0)
		return given < 0 ? given : ret;
	if (v) {
		width = v;
		width_of = "moe_shared_expert_intermediate_size";
	}
	if (given && shared) {
		if (width > INT_MAX / shared)
			return rlb_err_set(r->err, RLB_ECONFIG, "%s: the shared expert's width, "
					   "'%s' %d times %d, is out of range", r->path, which,
					   shared, width);
		set(r, RLB_HF_SHARED, 1, which);
		snprintf(from, sizeof(from), "%s * %s %d", width_of, which, shared);
		set(r, RLB_HF_SHARED_FFN, width * shared, from);
		return 0;
	}
	if (!given && v) {
		set(r, RLB_HF_SHARED, 1, width_of);
		set(r, RLB_HF_SHARED_FFN, v, width_of);
		return 0;
	}
	if ((ret = get_first(r, n_width, &v, &which)) < 0)
		return ret;
	if (ret && v) {
		set(r, RLB_HF_SHARED, 1, which);
		set(r, RLB_HF_SHARED_FFN, v, which);
	} else if (json_is_true(json_object_get(r->obj, "use_residual"))) {
		/* Arctic: a dense MLP of the model's width beside the experts of a MoE layer */
		set(r, RLB_HF_SHARED, 1, "use_residual");
		set(r, RLB_HF_SHARED_FFN, r->hm->model.hidden, "use_residual: hidden_size");
	} else if (!strcmp(r->hm->model_type, "llama4_text")) {
		set(r, RLB_HF_SHARED, 1, "llama4: one shared expert");
		set(r, RLB_HF_SHARED_FFN, r->hm->model.expert_ffn, "intermediate_size");
	} else {
		set(r, RLB_HF_SHARED, 0, "no shared experts");
		set(r, RLB_HF_SHARED_FFN, 0, "no shared experts");
	}
	return 0;
}

/* Group-limited routing; one group limits nothing. */
static int read_groups(struct reader *r)
{
	int groups = 0, v = 0, ret;

	if ((ret = get_int(r, "n_group", &groups)) < 0 ||
	    (ret = get_int(r, "topk_group", &v)) < 0)
		return ret;
	if (groups > 1) {
		set(r, RLB_HF_GROUPS, groups, "n_group");
		set(r, RLB_HF_TOPK_GROUPS, v, "topk_group");
	} else {
		set(r, RLB_HF_GROUPS, 0, groups ? "n_group 1: no group limit" : "no expert groups");
		set(r, RLB_HF_TOPK_GROUPS, 0, groups ? "n_group 1: no group limit" : "no expert groups");
	}
	return 0;
}

/* MLA's compressed widths, with its query/key head of NOPE + ROPE. */
static int read_mla(struct reader *r, int heads, int nope, int rope)
{
	static const char *const f[] = { "kv_lora_rank", "q_lora_rank", "v_head_dim" };
	static const int k[] = { RLB_HF_KV_LORA, RLB_HF_Q_LORA, RLB_HF_V_DIM };
	int x, i, ret;

	set(r, RLB_HF_KV_HEADS, heads, "MLA: num_attention_heads");
	set(r, RLB_HF_HEAD_DIM, nope + rope, "qk_nope_head_dim + qk_rope_head_dim");
	set(r, RLB_HF_ROPE_DIM, rope, "qk_rope_head_dim");
	for (i = 0; i < 3; i++) {
		x = 0;
		if ((ret = get_int(r, f[i], &x)) < 0)
			return ret;
		set(r, k[i], x, ret ? f[i] : i == 1 ? "no q_lora_rank: a full query" : "not given");
	}
	if (!r->hm->model.kv_lora_rank)
		return rlb_err_set(r->err, RLB_ECONFIG, "%s: MLA head dimensions "
				   "('qk_nope_head_dim', 'qk_rope_head_dim') without "
				   "'kv_lora_rank'", r->path);
	return 0;
}

/*
 * JetMoE's mixture of attention heads: each token's query and output
 * projections come from num_experts_per_tok of the experts, each of
 * num_key_value_heads heads of kv_channels, over keys and values that
 * every expert shares.  Its FLOPs are those of num_key_value_heads x
 * num_experts_per_tok query heads over num_key_value_heads key/value
 * heads; the attention experts' own balance is not modelled.
 */
static int read_moa(struct reader *r)
{
	int kv = 0, d = 0, ret;

	if ((ret = get_int(r, "num_key_value_heads", &kv)) < 0 ||
	    (ret = get_int(r, "kv_channels", &d)) < 0)
		return ret;
	if (!kv || !d)
		return rlb_err_set(r->err, RLB_ECONFIG, "%s: JetMoE's mixture of attention "
				   "needs 'num_key_value_heads' and 'kv_channels'", r->path);
	set(r, RLB_HF_Q_HEADS, kv * r->hm->model.topk,
	    "jetmoe: num_key_value_heads x num_experts_per_tok (mixture of attention)");
	set(r, RLB_HF_KV_HEADS, kv, "num_key_value_heads");
	set(r, RLB_HF_HEAD_DIM, d, "kv_channels");
	return 0;
}

/*
 * Attention: MLA's query/key head, an explicit head_dim, or hidden /
 * heads; JetMoE's mixture of attention heads (read_moa); Qwen3-Next's
 * output gate, or one attn_output_gate names.
 * DeepSeek's sparse attention (index_topk: DeepSeek-V3.2, GLM-5), each
 * query over the keys its indexer picks, is priced as the full attention
 * it selects from, an upper bound, and the q_heads comment says so.
 */
static int read_attention(struct reader *r)
{
	int heads = 0, kv = 0, nope = 0, rope = 0, v = 0, topk = 0, ret;
	char from[96];

	if ((ret = get_int(r, "num_attention_heads", &heads)) < 0 ||
	    (ret = get_int(r, "qk_nope_head_dim", &nope)) < 0 ||
	    (ret = get_int(r, "qk_rope_head_dim", &rope)) < 0 ||
	    (ret = get_int(r, "index_topk", &topk)) < 0)
		return ret;
	if (topk)
		snprintf(from, sizeof(from), "num_attention_heads; sparse (index_topk %d) priced "
			 "as full", topk);
	else
		snprintf(from, sizeof(from), "%s", heads ? "num_attention_heads" :
			 "no attention heads given");
	set(r, RLB_HF_Q_HEADS, heads, from);
	for (v = RLB_HF_KV_LORA; v <= RLB_HF_V_DIM; v++)
		set(r, v, 0, "no MLA");
	if (!strcmp(r->hm->model_type, "jetmoe")) {
		if ((ret = read_moa(r)) < 0)
			return ret;
	} else if (nope + rope > 0) {
		if ((ret = read_mla(r, heads, nope, rope)) < 0)
			return ret;
	} else {
		if ((ret = get_int(r, "num_key_value_heads", &kv)) < 0)
			return ret;
		set(r, RLB_HF_KV_HEADS, ret ? kv : heads,
		    ret ? "num_key_value_heads" : "num_attention_heads");
		if ((ret = get_int(r, "head_dim", &v)) < 0)
			return ret;
		if (ret)
			set(r, RLB_HF_HEAD_DIM, v, "head_dim");
		else
			set(r, RLB_HF_HEAD_DIM, heads ? r->hm->model.hidden / heads : 0,
			    "hidden_size / num_attention_heads");
	}
	if (!strcmp(r->hm->model_type, "qwen3_next"))
		set(r, RLB_HF_GATE, 1, "qwen3_next: gated attention");
	else if (json_is_true(json_object_get(r->obj, "attn_output_gate")))
		set(r, RLB_HF_GATE, 1, "attn_output_gate");
	else
		set(r, RLB_HF_GATE, 0, "no output gate");
	return 0;
}

/* How each of the L layers attends, fitted to relibra's attention pattern. */
static int read_attention_kinds(struct reader *r, int L)
{
	unsigned char *kinds = malloc((size_t)L);
	char rule[96] = "";
	int ret;

	if (!kinds)
		return rlb_err_set(r->err, RLB_ENOMEM, "out of memory");
	if ((ret = kinds_of(r, L, kinds, rule, sizeof(rule))) >= 0)
		ret = fit_kinds(r, kinds, L, rule);
	free(kinds);
	return ret < 0 ? ret : 0;
}

static int read_model(struct reader *r)
{
	/* the keys every MoE config.json gives, each by one of these fields */
	static const struct {
		int key;
		const char *const names[5];
	} needed[] = {
		{ RLB_HF_EXPERTS, { "n_routed_experts", "num_local_experts", "num_experts", "moe_num_experts" } },
		{ RLB_HF_TOPK, { "num_experts_per_tok", "experts_per_token", "moe_k", NULL } },
		{ RLB_HF_HIDDEN, { "hidden_size", NULL } },
		{ RLB_HF_EXPERT_FFN, { "moe_intermediate_size", "intermediate_size", NULL } },
	};
	static const char *const n_layers[] = { "num_hidden_layers", NULL };
	const char *which = NULL;
	int i, x, L = 0, ret;

	/* ERNIE 4.5 VL: a list per modality, text experts and vision experts */
	if (json_is_array(json_object_get(r->obj, "moe_num_experts")))
		return rlb_err_set(r->err, RLB_ECONFIG, "%s: 'moe_num_experts' is a list, one "
				   "per modality (ERNIE 4.5 VL): relibra models one set of experts "
				   "per layer", r->path);
	for (i = 0; i < (int)(sizeof(needed) / sizeof(needed[0])); i++) {
		if ((ret = required(r, needed[i].names, &x, &which)) < 0)
			return ret;
		set(r, needed[i].key, x, which);
	}
	/* latent MoE (Nemotron 3 Super): null or 0 for none, and then not written */
	if ((ret = get_int(r, "moe_latent_size", &x)) < 0)
		return ret;
	if (ret && x)
		set(r, RLB_HF_MOE_LATENT, x, "moe_latent_size");
	if (json_object_get(r->obj, "attn_layer_period") || !strcmp(r->hm->model_type, "jamba"))
		return rlb_err_set(r->err, RLB_ECONFIG, "%s: Jamba's Mamba layers ('%s'): they "
				   "are Mamba-1 mixers, and relibra models Mamba-2 ones", r->path,
				   json_object_get(r->obj, "attn_layer_period") ?
				   "attn_layer_period" : "model_type");
	if (is_nemotron_h(r)) {
		if ((ret = read_hybrid(r)) < 0)
			return ret;
	} else {
		if ((ret = required(r, n_layers, &L, &which)) < 0)
			return ret;
		if (L < 1 || L > RLB_TRACE_MAX_LAYERS * RLB_MAX_MOE_LAYER_PERIOD)
			return rlb_err_set(r->err, RLB_ECONFIG, "%s: 'num_hidden_layers' %d is out "
					   "of range [1, %d]", r->path, L,
					   RLB_TRACE_MAX_LAYERS * RLB_MAX_MOE_LAYER_PERIOD);
		if ((ret = read_decoder_layers(r, L)) < 0)
			return ret;
	}
	if ((ret = read_shared(r)) < 0 || (ret = read_groups(r)) < 0 ||
	    (ret = read_attention(r)) < 0)
		return ret;
	/* a pattern's attention layers attend in full: no kinds to fit */
	return L ? read_attention_kinds(r, L) : 0;
}

/* The checks relibra.yaml(5) makes on a model section, on one GPU. */
static int check_model(struct reader *r)
{
	struct rlb_config cfg;
	int ret;

	rlb_config_defaults(&cfg);
	cfg.model = r->hm->model;
	cfg.cluster.nodes = 1;
	cfg.cluster.gpus_per_node = 1;
	ret = rlb_config_validate(&cfg, r->err);
	if (ret < 0)
		rlb_err_prefix(r->err, "%s: the model section made from it", r->path);
	return ret;
}

static void default_name(struct reader *r, const char *name)
{
	json_t *v = json_object_get(r->obj, "_name_or_path");
	const char *s = NULL, *slash;

	if (name)
		s = name;
	else if (json_is_string(v) && json_string_length(v)) {
		s = json_string_value(v);
		slash = strrchr(s, '/');
		s = slash && slash[1] ? slash + 1 : s;
		if (!rlb_cfg_preset_name_ok(s, strlen(s)))
			s = NULL;
	}
	if (!s)
		s = rlb_cfg_preset_name_ok(r->hm->model_type, strlen(r->hm->model_type)) ?
		    r->hm->model_type : "model";
	snprintf(r->hm->model.name, sizeof(r->hm->model.name), "%s", s);
}

/* A configuration's model defaults: a key a config.json does not give keeps its. */
static void model_defaults(struct rlb_model_config *m)
{
	struct rlb_config cfg;

	rlb_config_defaults(&cfg);
	*m = cfg.model;
}

/* what --from-hf takes, in messages */
#define HF_WANT "a Hugging Face config.json"

static int hf_model_load_c(struct rlb_hf_model *hm, const char *path, const char *name,
			   struct rlb_err *err)
{
	struct reader r = { path, NULL, hm, err };
	int is_stdin = !strcmp(path, "-");
	json_error_t je;
	json_t *root = NULL, *text, *type;
	FILE *fp;
	int ret;

	memset(hm, 0, sizeof(*hm));
	model_defaults(&hm->model);
	snprintf(hm->path, sizeof(hm->path), "%s", path);
	if (name && !rlb_cfg_preset_name_ok(name, strlen(name)))
		return rlb_err_set(err, RLB_EINVAL, "model name '%s' must be letters, digits, "
				   "'-', '_' or '.', not first, at most %d bytes", name,
				   RLB_NAME_MAX - 1);
	fp = is_stdin ? stdin : fopen(path, "rb");
	if (!fp)
		return rlb_err_errno(err, RLB_EIO, "cannot open '%s'", path);
	root = json_loadf(fp, JSON_REJECT_DUPLICATES, &je);
	if (!root) {
		int line, column, byte;

		rlb_json_error_where(&je, &line, &column, &byte);
		if (ferror(fp))
			ret = rlb_err_errno(err, RLB_EIO, "cannot read '%s'", path);
		else if ((ret = rlb_kind_err_fd(err, RLB_EPARSE, fileno(fp), 1,
						RLB_KIND_HF_CONFIG, path, HF_WANT,
						rlb_sniff_fd(fileno(fp)) == RLB_KIND_YAML_CONFIG ?
						": give it as -c" : NULL)))
			;
		else
			ret = rlb_err_set(err, RLB_EPARSE, "%s:%d:%d: invalid JSON (byte %d): %s",
					  path, line, column, byte, je.text);
		goto out;
	}
	if (!json_is_object(root)) {
		ret = rlb_err_set(err, RLB_ECONFIG, "%s: expected a JSON object (a config.json)",
				  path);
		goto out;
	}
	/* relibra's own JSON files carry a schema; a config.json does not */
	if (json_object_get(root, "schema") &&
	    (ret = rlb_kind_err_fd(err, RLB_ECONFIG, fileno(fp), 0, RLB_KIND_HF_CONFIG,
				   path, HF_WANT, NULL)))
		goto out;
	/* a multimodal model keeps its language model's fields in text_config */
	text = json_object_get(root, "text_config");
	r.obj = json_is_object(text) ? text : root;
	type = json_object_get(r.obj, "model_type");
	if (!json_is_string(type))
		type = json_object_get(root, "model_type");
	if (json_is_string(type))
		snprintf(hm->model_type, sizeof(hm->model_type), "%s", json_string_value(type));
	ret = read_model(&r);
	if (ret == 0) {
		r.obj = root;
		default_name(&r, name);
		ret = check_model(&r);
	}
out:
	json_decref(root);
	if (!is_stdin)
		fclose(fp);
	return ret;
}

/* hf_model_load_c in the C locale (clocale.h) */
int rlb_hf_model_load(struct rlb_hf_model *hm, const char *path, const char *name,
		      struct rlb_err *err)
{
	locale_t before = rlb_clocale_begin();
	int ret = hf_model_load_c(hm, path, name, err);

	rlb_clocale_end(before);
	return ret;
}

/* S in a YAML comment: printable ASCII, '?' for every other byte. */
static void put_comment_text(FILE *fp, const char *s)
{
	for (; *s; s++)
		fputc(*s >= 0x20 && *s < 0x7f ? *s : '?', fp);
}

static int hf_model_write_yaml_c(const struct rlb_hf_model *hm, FILE *fp, struct rlb_err *err)
{
	struct rlb_model_config m = hm->model;
	int k, w;

	fprintf(fp, "# Model preset %s, made by `relibra config --from-hf` from ", m.name);
	put_comment_text(fp, hm->path);
	if (hm->model_type[0]) {
		fputs(" (model_type ", fp);
		put_comment_text(fp, hm->model_type);
		fputc(')', fp);
	}
	fprintf(fp, ".\n# Each key names the config.json fields it comes from.\n"
		    "model:\n  name: %s\n", m.name);
	for (k = 0; k < RLB_HF_KEYS; k++) {
		if (!hm->from[k][0])
			continue;	/* not this model's kind */
		if (k == RLB_HF_PATTERN)	/* quoted: it may start with '*' or '-' */
			w = fprintf(fp, "  %s: \"%s\"", key_names[k], m.layer_pattern);
		else if (k == RLB_HF_GATE || k == RLB_HF_GATED)
			w = fprintf(fp, "  %s: %s", key_names[k], *field_of(&m, k) ? "true" : "false");
		else
			w = fprintf(fp, "  %s: %d", key_names[k], *field_of(&m, k));
		/* a source may quote the input (mlp_hidden_act) */
		fprintf(fp, "%*s# ", w < 26 ? 26 - w : 1, "");
		put_comment_text(fp, hm->from[k]);
		fputc('\n', fp);
	}
	/* what stdio still buffers fails at the caller's flush, with its errno */
	if (ferror(fp))
		return rlb_err_errno(err, RLB_EIO, "cannot write the model preset");
	return 0;
}

/* hf_model_write_yaml_c in the C locale (clocale.h) */
int rlb_hf_model_write_yaml(const struct rlb_hf_model *hm, FILE *fp, struct rlb_err *err)
{
	locale_t before = rlb_clocale_begin();
	int ret = hf_model_write_yaml_c(hm, fp, err);

	rlb_clocale_end(before);
	return ret;
}
