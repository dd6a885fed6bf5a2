/*
 * config_check.c - validation of a configuration: required keys, every
 * key's range, and the rules between keys.  Each error blames a key the
 * user wrote (file:line:col or the --set), else the preset that set it.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "clocale.h"
#include "config.h"
#include "config_impl.h"

/* ------------------------------------------------------------------ */
/* Validation.                                                         */

#define KEY(sec, name) (sec), rlb_cfg_find_key((sec), (name))

/*
 * Blame one of N keys given as (section, key) pairs: a key the user wrote
 * (in the config file or a --set) first, then the --set that pulled in a
 * preset setting one, then a key set in a preset, else the file.
 */
static int vfail_keys(struct loader *ld, int n, const int *sk, const char *fmt,
		      va_list ap)
{
	const struct mark *m;
	int i, pass;

	for (pass = 0; pass < 3; pass++) {
		for (i = 0; i < n; i++) {
			if (sk[2 * i + 1] < 0)
				continue;
			m = &ld->marks[sk[2 * i]][sk[2 * i + 1]];
			if (m->src < 0)
				continue;
			if (pass == 0 && ld->srcs[m->src].kind != SRC_PRESET)
				return rlb_cfg_vfail(ld, m->src, m->line, m->col, fmt, ap);
			if (pass == 1 && m->origin >= 0 &&
			    ld->srcs[m->origin].kind == SRC_SET)
				return rlb_cfg_vfail(ld, m->origin, 0, 0, fmt, ap);
			if (pass == 2)
				return rlb_cfg_vfail(ld, m->src, m->line, m->col, fmt, ap);
		}
	}
	return rlb_cfg_vfail(ld, -1, 0, 0, fmt, ap);
}

__attribute__((format(printf, 4, 5)))
static int fail_key(struct loader *ld, int sec, int ki, const char *fmt, ...)
{
	int sk[2] = { sec, ki }, rc;
	va_list ap;

	va_start(ap, fmt);
	rc = vfail_keys(ld, 1, sk, fmt, ap);
	va_end(ap);
	return rc;
}

__attribute__((format(printf, 6, 7)))
static int fail_keys2(struct loader *ld, int sa, int ka, int sb, int kb,
		      const char *fmt, ...)
{
	int sk[4] = { sa, ka, sb, kb }, rc;
	va_list ap;

	va_start(ap, fmt);
	rc = vfail_keys(ld, 2, sk, fmt, ap);
	va_end(ap);
	return rc;
}

__attribute__((format(printf, 10, 11)))
static int fail_keys4(struct loader *ld, int sa, int ka, int sb, int kb, int sc,
		      int kc, int sd, int kd, const char *fmt, ...)
{
	int sk[8] = { sa, ka, sb, kb, sc, kc, sd, kd }, rc;
	va_list ap;

	va_start(ap, fmt);
	rc = vfail_keys(ld, 4, sk, fmt, ap);
	va_end(ap);
	return rc;
}

static int check_required(struct loader *ld)
{
	const struct section *S = &rlb_cfg_sections[SEC_MODEL];
	const struct mark *m = &ld->section_marks[SEC_MODEL];
	char list[512];
	size_t i, len = 0;
	int missing = 0;

	list[0] = '\0';
	for (i = 0; i < S->nkeys; i++) {
		if (!(S->keys[i].flags & KF_REQUIRED) ||
		    *(const int *)rlb_cfg_cfield(ld->cfg, &S->keys[i]) != 0)
			continue;
		len += (size_t)snprintf(list + len, sizeof(list) - len, "%s'%s.%s'",
					missing ? ", " : "", S->name, S->keys[i].name);
		missing++;
		if (len >= sizeof(list))
			break;
	}
	if (!missing)
		return 0;
	/* at the model section if there is one, else the file */
	return rlb_cfg_fail_at(ld, m->src, m->line, m->col, "missing required key%s %s",
			       missing > 1 ? "s" : "", list);
}

static int check_ranges(struct loader *ld)
{
	const struct rlb_config *cfg = ld->cfg;
	char range[96], num[40];
	const struct key *k;
	const void *p;
	size_t i;
	int s;

	for (s = 0; s < NSECTIONS; s++) {
		for (i = 0; i < rlb_cfg_sections[s].nkeys; i++) {
			k = &rlb_cfg_sections[s].keys[i];
			p = rlb_cfg_cfield(cfg, k);
			switch (k->type) {
			case KT_INT:
				if (rlb_cfg_in_range(k, *(const int *)p))
					continue;
				snprintf(num, sizeof(num), "%d", *(const int *)p);
				break;
			case KT_DOUBLE:
				if (rlb_cfg_in_range(k, *(const double *)p))
					continue;
				rlb_cfg_fmt_double(*(const double *)p, num, sizeof(num));
				break;
			case KT_BOOL:
				if (*(const int *)p == 0 || *(const int *)p == 1 ||
				    ((k->flags & KF_AUTO) && *(const int *)p == RLB_CFG_AUTO))
					continue;
				return fail_key(ld, s, (int)i, "'%s.%s' must be 0 or 1, not %d",
						rlb_cfg_sections[s].name, k->name, *(const int *)p);
			case KT_STRING:
				if (memchr(p, '\0', (size_t)k->max + 1))
					continue;
				return fail_key(ld, s, (int)i, "'%s.%s' is not terminated",
						rlb_cfg_sections[s].name, k->name);
			case KT_ENUM:
				if (rlb_cfg_enum_index(k, *(const int *)p) >= 0)
					continue;
				return fail_key(ld, s, (int)i, "'%s.%s' has no value %d",
						rlb_cfg_sections[s].name, k->name, *(const int *)p);
			case KT_CHOICE:
				if (memchr(p, '\0', RLB_NAME_MAX) &&
				    rlb_cfg_choice_index(k->choices, p) >= 0)
					continue;
				return fail_key(ld, s, (int)i, "'%s.%s' is not one of its values",
						rlb_cfg_sections[s].name, k->name);
			}
			return fail_key(ld, s, (int)i, "value %s for '%s.%s' is out of range %s",
					num, rlb_cfg_sections[s].name, k->name,
					rlb_cfg_range_text(k, range, sizeof(range)));
		}
	}
	return 0;
}

/*
 * A layer pattern: its letters, its MoE layers as many as moe_layers, no
 * periodic layout beside it, and the keys its letters need.  Its
 * attention layers attend in full: the keys that make layers windowed,
 * chunked or linear say which of a decoder's layers are, not which of a
 * pattern's.
 */
static int check_layer_pattern(struct loader *ld)
{
	const struct rlb_model_config *m = &ld->cfg->model;
	static const char *const periodic[] = {
		"first_dense_layers", "moe_layer_period", "moe_layer_offset",
		"attention_window", "attention_chunk", "full_attention_period",
		"linear_value_heads",
	};
	const int values[] = {
		m->first_dense_layers, m->moe_layer_period > 1, m->moe_layer_offset,
		m->attention_window, m->attention_chunk, m->full_attention_period,
		m->linear_value_heads,
	};
	int mamba = m->mamba_heads || m->mamba_head_dim || m->mamba_state || m->mamba_groups;
	const char *pat = m->layer_pattern;
	long bad, moe;
	int has_mamba = strchr(pat, 'M') != NULL, has_mlp = strchr(pat, '-') != NULL;
	size_t k;

	if (!pat[0]) {
		if (mamba)
			return fail_keys2(ld, KEY(SEC_MODEL, "mamba_heads"), KEY(SEC_MODEL, "layer_pattern"),
					  "the 'model.mamba_*' keys need a 'model.layer_pattern' with "
					  "Mamba-2 layers ('M')");
		return 0;
	}
	bad = rlb_layer_pattern_scan(pat, strlen(pat), &moe);
	if (bad >= 0) {
		unsigned char c = (unsigned char)pat[bad];

		return fail_key(ld, KEY(SEC_MODEL, "layer_pattern"),
				c < 0x20 || c >= 0x7f ?
				"'model.layer_pattern' has byte 0x%02x at layer %ld (expected E, M, * or -)" :
				"'model.layer_pattern' has '%c' at layer %ld (expected E, M, * or -)",
				c, bad);
	}
	if (moe != m->moe_layers)
		return fail_keys2(ld, KEY(SEC_MODEL, "moe_layers"), KEY(SEC_MODEL, "layer_pattern"),
				  "'model.moe_layers' %d is not the %ld MoE layers ('E') of "
				  "'model.layer_pattern'", m->moe_layers, moe);
	for (k = 0; k < sizeof(periodic) / sizeof(periodic[0]); k++)
		if (values[k])
			return fail_keys2(ld, KEY(SEC_MODEL, periodic[k]), KEY(SEC_MODEL, "layer_pattern"),
					  "'model.%s' with 'model.layer_pattern': %s", periodic[k],
					  k < 3 ? "the pattern gives every layer" :
					  "a pattern's attention layers ('*') attend in full");
	if (has_mlp && !m->dense_ffn)
		return fail_keys2(ld, KEY(SEC_MODEL, "layer_pattern"), KEY(SEC_MODEL, "dense_ffn"),
				  "'model.layer_pattern' has dense FFN layers ('-') and needs "
				  "'model.dense_ffn'");
	if (has_mamba && !(m->mamba_heads && m->mamba_head_dim && m->mamba_state))
		return fail_keys2(ld, KEY(SEC_MODEL, !m->mamba_heads ? "mamba_heads" :
				      !m->mamba_head_dim ? "mamba_head_dim" : "mamba_state"),
				  KEY(SEC_MODEL, "layer_pattern"),
				  "'model.layer_pattern' has Mamba-2 layers ('M') and needs "
				  "'model.mamba_heads', 'model.mamba_head_dim' and 'model.mamba_state'");
	if (!has_mamba && mamba)
		return fail_keys2(ld, KEY(SEC_MODEL, "mamba_heads"), KEY(SEC_MODEL, "layer_pattern"),
				  "the 'model.mamba_*' keys need Mamba-2 layers ('M') in "
				  "'model.layer_pattern'");
	if (m->mamba_groups && m->mamba_heads % m->mamba_groups)
		return fail_keys2(ld, KEY(SEC_MODEL, "mamba_groups"), KEY(SEC_MODEL, "mamba_heads"),
				  "'model.mamba_groups' %d does not divide 'model.mamba_heads' %d",
				  m->mamba_groups, m->mamba_heads);
	return 0;
}

int rlb_cfg_validate(struct loader *ld)
{
	const struct rlb_config *c = ld->cfg;
	const struct rlb_model_config *m = &c->model;
	const struct rlb_workload_config *w = &c->workload;
	int gpus, ep, rc;

	rc = check_required(ld);
	if (rc < 0)
		return rc;
	rc = check_ranges(ld);
	if (rc < 0)
		return rc;
	rc = check_layer_pattern(ld);
	if (rc < 0)
		return rc;
	if (m->topk > m->experts)
		return fail_keys2(ld, KEY(SEC_MODEL, "topk"), KEY(SEC_MODEL, "experts"),
				  "'model.topk' %d exceeds 'model.experts' %d",
				  m->topk, m->experts);
	if (m->expert_groups && m->experts % m->expert_groups)
		return fail_keys2(ld, KEY(SEC_MODEL, "expert_groups"), KEY(SEC_MODEL, "experts"),
				  "'model.expert_groups' %d does not divide 'model.experts' %d",
				  m->expert_groups, m->experts);
	if (m->topk_groups > m->expert_groups)
		return fail_keys2(ld, KEY(SEC_MODEL, "topk_groups"), KEY(SEC_MODEL, "expert_groups"),
				  "'model.topk_groups' %d exceeds 'model.expert_groups' %d",
				  m->topk_groups, m->expert_groups);
	if (m->expert_groups && !m->topk_groups)
		return fail_keys2(ld, KEY(SEC_MODEL, "expert_groups"), KEY(SEC_MODEL, "topk_groups"),
				  "'model.expert_groups' %d needs 'model.topk_groups' between 1 and %d",
				  m->expert_groups, m->expert_groups);
	if (m->expert_groups &&
	    (long)m->topk > (long)m->topk_groups * (m->experts / m->expert_groups))
		return fail_keys4(ld, KEY(SEC_MODEL, "topk"), KEY(SEC_MODEL, "topk_groups"),
				  KEY(SEC_MODEL, "expert_groups"), KEY(SEC_MODEL, "experts"),
				  "'model.topk' %d exceeds 'model.topk_groups' %d x %d experts per group "
				  "('model.experts' %d / 'model.expert_groups' %d)",
				  m->topk, m->topk_groups, m->experts / m->expert_groups,
				  m->experts, m->expert_groups);
	/* a latent as wide as the model saves nothing and adds two projections */
	if (m->moe_latent >= m->hidden)
		return fail_keys2(ld, KEY(SEC_MODEL, "moe_latent"), KEY(SEC_MODEL, "hidden"),
				  "'model.moe_latent' %d is not below 'model.hidden' %d",
				  m->moe_latent, m->hidden);
	if (m->shared_experts && !m->shared_expert_ffn)
		return fail_keys2(ld, KEY(SEC_MODEL, "shared_experts"), KEY(SEC_MODEL, "shared_expert_ffn"),
				  "'model.shared_experts' %d needs 'model.shared_expert_ffn'",
				  m->shared_experts);
	if (m->first_dense_layers && !m->dense_ffn)
		return fail_keys2(ld, KEY(SEC_MODEL, "first_dense_layers"), KEY(SEC_MODEL, "dense_ffn"),
				  "'model.first_dense_layers' %d needs 'model.dense_ffn'",
				  m->first_dense_layers);
	if (m->moe_layer_offset >= m->moe_layer_period)
		return fail_keys2(ld, KEY(SEC_MODEL, "moe_layer_offset"), KEY(SEC_MODEL, "moe_layer_period"),
				  "'model.moe_layer_offset' %d is not below 'model.moe_layer_period' %d",
				  m->moe_layer_offset, m->moe_layer_period);
	if (m->moe_layer_period > 1 && !m->dense_ffn)
		return fail_keys2(ld, KEY(SEC_MODEL, "moe_layer_period"), KEY(SEC_MODEL, "dense_ffn"),
				  "'model.moe_layer_period' %d needs 'model.dense_ffn'",
				  m->moe_layer_period);
	if (!!m->linear_value_heads + !!m->attention_window + !!m->attention_chunk > 1)
		return fail_keys2(ld, KEY(SEC_MODEL, m->linear_value_heads ? "linear_value_heads" :
					  "attention_chunk"),
				  KEY(SEC_MODEL, m->attention_window ? "attention_window" :
				      "attention_chunk"),
				  "more than one of 'model.linear_value_heads', 'model.attention_window' "
				  "and 'model.attention_chunk': the layers that are not full are "
				  "linear, windowed or chunked");
	if ((m->linear_key_heads || m->linear_value_heads || m->linear_key_head_dim ||
	     m->linear_value_head_dim) &&
	    !(m->linear_key_heads && m->linear_value_heads && m->linear_key_head_dim &&
	      m->linear_value_head_dim))
		return fail_keys2(ld, KEY(SEC_MODEL, "linear_value_heads"),
				  KEY(SEC_MODEL, "linear_key_heads"),
				  "linear attention needs all of 'model.linear_key_heads', "
				  "'model.linear_value_heads', 'model.linear_key_head_dim' and "
				  "'model.linear_value_head_dim'");
	if (!m->kv_lora_rank && (m->q_lora_rank || m->qk_rope_head_dim || m->v_head_dim))
		return fail_keys2(ld, KEY(SEC_MODEL, m->q_lora_rank ? "q_lora_rank" :
					  m->qk_rope_head_dim ? "qk_rope_head_dim" : "v_head_dim"),
				  KEY(SEC_MODEL, "kv_lora_rank"),
				  "'model.%s' needs 'model.kv_lora_rank' (multi-head latent attention)",
				  m->q_lora_rank ? "q_lora_rank" : m->qk_rope_head_dim ?
				  "qk_rope_head_dim" : "v_head_dim");
	/* without its heads MLA would charge negative or headless projections */
	if (m->kv_lora_rank && (!m->q_heads || !m->head_dim))
		return fail_keys2(ld, KEY(SEC_MODEL, "kv_lora_rank"),
				  KEY(SEC_MODEL, m->q_heads ? "head_dim" : "q_heads"),
				  "'model.kv_lora_rank' %d needs 'model.q_heads' and 'model.head_dim' "
				  "(multi-head latent attention's query/key heads)", m->kv_lora_rank);
	if (m->kv_lora_rank && m->qk_rope_head_dim >= m->head_dim)
		return fail_keys2(ld, KEY(SEC_MODEL, "qk_rope_head_dim"), KEY(SEC_MODEL, "head_dim"),
				  "'model.qk_rope_head_dim' %d is not below 'model.head_dim' %d (the "
				  "query/key head, its rotary part included)",
				  m->qk_rope_head_dim, m->head_dim);
	if (m->q_heads && m->kv_heads && m->q_heads % m->kv_heads)
		return fail_keys2(ld, KEY(SEC_MODEL, "kv_heads"), KEY(SEC_MODEL, "q_heads"),
				  "'model.kv_heads' %d does not divide 'model.q_heads' %d",
				  m->kv_heads, m->q_heads);
	gpus = rlb_config_gpus(c);
	ep = c->parallel.ep_size ? c->parallel.ep_size : gpus;
	/* an EP group spans whole nodes, or fits in one */
	if (ep > c->cluster.gpus_per_node && ep % c->cluster.gpus_per_node)
		return fail_keys2(ld, KEY(SEC_PARALLEL, "ep_size"), KEY(SEC_CLUSTER, "gpus_per_node"),
				  "'parallel.ep_size' %d is neither a multiple of 'cluster.gpus_per_node' %d "
				  "nor below it", ep, c->cluster.gpus_per_node);
	if (ep > gpus)
		return fail_keys2(ld, KEY(SEC_PARALLEL, "ep_size"), KEY(SEC_CLUSTER, "nodes"),
				  "'parallel.ep_size' %d exceeds the cluster's %d GPU%s ('cluster.nodes' %d x 'cluster.gpus_per_node' %d)",
				  ep, gpus, gpus == 1 ? "" : "s", c->cluster.nodes,
				  c->cluster.gpus_per_node);
	if (m->experts % ep && c->parallel.ep_size)
		return fail_keys4(ld, KEY(SEC_MODEL, "experts"), KEY(SEC_PARALLEL, "ep_size"),
				  KEY(SEC_CLUSTER, "nodes"), KEY(SEC_CLUSTER, "gpus_per_node"),
				  "'model.experts' %d is not divisible by 'parallel.ep_size' %d",
				  m->experts, ep);
	if (m->experts % ep)	/* ep_size 0: every GPU of the cluster */
		return fail_keys4(ld, KEY(SEC_MODEL, "experts"), KEY(SEC_PARALLEL, "ep_size"),
				  KEY(SEC_CLUSTER, "nodes"), KEY(SEC_CLUSTER, "gpus_per_node"),
				  "'model.experts' %d is not divisible by the EP size %d ('parallel.ep_size' 0: "
				  "all the cluster's GPUs, 'cluster.nodes' %d x 'cluster.gpus_per_node' %d)",
				  m->experts, ep, c->cluster.nodes, c->cluster.gpus_per_node);
	if (w->len_min > w->len_max)
		return fail_keys2(ld, KEY(SEC_WORKLOAD, "len_min"), KEY(SEC_WORKLOAD, "len_max"),
				  "'workload.len_min' %d exceeds 'workload.len_max' %d",
				  w->len_min, w->len_max);
	if (w->segment_min > w->segment_max)
		return fail_keys2(ld, KEY(SEC_WORKLOAD, "segment_min"), KEY(SEC_WORKLOAD, "segment_max"),
				  "'workload.segment_min' %d exceeds 'workload.segment_max' %d",
				  w->segment_min, w->segment_max);
	return 0;
}

/* ------------------------------------------------------------------ */
/* Public interface.                                                   */

static int config_validate_c(const struct rlb_config *cfg, struct rlb_err *err)
{
	struct loader ld;
	int rc;

	/* The loader only reads through cfg here. */
	rlb_cfg_loader_init(&ld, (struct rlb_config *)cfg, cfg->path, err);
	rc = rlb_cfg_validate(&ld);
	rlb_cfg_loader_release(&ld);
	return rc;
}

/* config_validate_c in the C locale (clocale.h): its messages quote numbers */
int rlb_config_validate(const struct rlb_config *cfg, struct rlb_err *err)
{
	locale_t before = rlb_clocale_begin();
	int ret = config_validate_c(cfg, err);

	rlb_clocale_end(before);
	return ret;
}
