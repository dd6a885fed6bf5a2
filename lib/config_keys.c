/*
 * config_keys.c - the configuration's keys: one table per section of
 * {key, type, offset, min, max}, lookups by name, the text of types,
 * ranges and values, the defaults, the effective configuration written
 * back as YAML, the built-in preset names and the derived sizes.
 */
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clocale.h"
#include "capture.h"
#include "config.h"
#include "config_impl.h"
#include "preset.h"
#include "trace.h"

#define OFF(sec, f) offsetof(struct rlb_config, sec.f)
#define FIELD_SIZE(sec, f) sizeof(((struct rlb_config *)0)->sec.f)

/* Rows: the key's name is the field's name. */
#define KINT(sec, f, lo, hi) \
	{ .name = #f, .type = KT_INT, .offset = OFF(sec, f), .min = (lo), .max = (hi) }
#define KREQ(sec, f, lo, hi) \
	{ .name = #f, .type = KT_INT, .offset = OFF(sec, f), .min = (lo), .max = (hi), \
	  .flags = KF_REQUIRED }
#define KDBL(sec, f, lo, hi) \
	{ .name = #f, .type = KT_DOUBLE, .offset = OFF(sec, f), .min = (lo), .max = (hi) }
#define KBOOL(sec, f) \
	{ .name = #f, .type = KT_BOOL, .offset = OFF(sec, f), .min = 0, .max = 1 }
#define KBOOL_AUTO(sec, f) \
	{ .name = #f, .type = KT_BOOL, .offset = OFF(sec, f), .min = 0, .max = 1, \
	  .flags = KF_AUTO }
#define KSTR(sec, f) \
	{ .name = #f, .type = KT_STRING, .offset = OFF(sec, f), .min = 0, \
	  .max = FIELD_SIZE(sec, f) - 1 }
#define KENUM(sec, f, names, vals) \
	{ .name = #f, .type = KT_ENUM, .offset = OFF(sec, f), .choices = (names), \
	  .values = (vals) }
#define KCHOICE(sec, f, names) \
	{ .name = #f, .type = KT_CHOICE, .offset = OFF(sec, f), .choices = (names) }

/* The packing rules a config names (the others come with a plan). */
static const char *const pack_names[] = { "in-order", "ffd", "dynamic", NULL };
static const int pack_values[] = { RLB_PACK_IN_ORDER, RLB_PACK_FFD, RLB_PACK_DYNAMIC };
static const char *const policy_names[] = {
	"static", "eplb", "eplb-oracle", "replicate", "relibra", "ideal", NULL
};

_Static_assert(sizeof(enum rlb_pack) == sizeof(int), "enum rlb_pack is stored as int");
_Static_assert(FIELD_SIZE(balancer, policy) == RLB_NAME_MAX, "policy buffer");
_Static_assert(RLB_LAYER_PATTERN_MAX == RLB_TRACE_MAX_LAYERS + 1,
	       "a layer pattern holds the layers a trace can");

static const struct key model_keys[] = {
	KSTR(model, name),
	/* experts, topk, moe_layers, first_dense_layers: what a trace can hold */
	KREQ(model, experts, 1, RLB_TRACE_MAX_EXPERTS),
	KREQ(model, topk, 1, RLB_TRACE_MAX_TOPK),
	KREQ(model, hidden, 1, 1048576),
	KREQ(model, expert_ffn, 1, 1048576),
	KINT(model, moe_latent, 0, 1048576),
	KREQ(model, moe_layers, 1, RLB_TRACE_MAX_LAYERS),
	KINT(model, first_dense_layers, 0, RLB_TRACE_MAX_LAYERS),
	KINT(model, moe_layer_period, 1, RLB_MAX_MOE_LAYER_PERIOD),
	KINT(model, moe_layer_offset, 0, RLB_MAX_MOE_LAYER_PERIOD - 1),
	KSTR(model, layer_pattern),
	KINT(model, dense_ffn, 0, 1048576),
	KINT(model, shared_experts, 0, 64),
	KINT(model, shared_expert_ffn, 0, 1048576),
	KBOOL(model, gated_ffn),
	KINT(model, expert_groups, 0, 65536),
	KINT(model, topk_groups, 0, 65536),
	KINT(model, q_heads, 0, 4096),
	KINT(model, kv_heads, 0, 4096),
	KINT(model, head_dim, 0, 4096),
	KINT(model, kv_lora_rank, 0, 1048576),
	KINT(model, q_lora_rank, 0, 1048576),
	KINT(model, qk_rope_head_dim, 0, 4096),
	KINT(model, v_head_dim, 0, 4096),
	KBOOL(model, attention_output_gate),
	KINT(model, attention_window, 0, 16777216),
	KINT(model, attention_chunk, 0, 16777216),
	KINT(model, full_attention_period, 0, RLB_TRACE_MAX_LAYERS),
	KINT(model, linear_key_heads, 0, 4096),
	KINT(model, linear_value_heads, 0, 4096),
	KINT(model, linear_key_head_dim, 0, 4096),
	KINT(model, linear_value_head_dim, 0, 4096),
	KINT(model, mamba_heads, 0, 65536),
	KINT(model, mamba_head_dim, 0, 4096),
	KINT(model, mamba_state, 0, 4096),
	KINT(model, mamba_groups, 0, 65536),
	KDBL(model, dense_time_ms, 0, 1e6),
};

static const struct key cluster_keys[] = {
	KSTR(cluster, name),
	KINT(cluster, nodes, 1, 4096),
	KINT(cluster, gpus_per_node, 1, 1024),
	/* rates and efficiency from 1e-6: near 0, no time would be finite */
	KDBL(cluster, peak_tflops, 1e-6, 1e6),
	KDBL(cluster, hbm_gbps, 1e-6, 1e6),
	KDBL(cluster, gemm_eff_max, 1e-6, 1),
	KDBL(cluster, gemm_eff_half_rows, 0, 1e6),
	KDBL(cluster, nvlink_gbps, 1e-6, 1e6),
	KDBL(cluster, nvlink_latency_us, 0, 1e6),
	KDBL(cluster, rdma_gbps, 1e-6, 1e6),
	KDBL(cluster, rdma_latency_us, 0, 1e6),
};

static const struct key parallel_keys[] = {
	KINT(parallel, ep_size, 0, 262144),
	KINT(parallel, micro_batch_tokens, 1, 16777216),
	KBOOL(parallel, recompute),
	KENUM(parallel, pack, pack_names, pack_values),
};

static const struct key balancer_keys[] = {
	KCHOICE(balancer, policy, policy_names),
	KINT(balancer, replica_slots, 0, RLB_REPLICA_SLOTS_MAX),
	KINT(balancer, min_tokens_per_replica, 0, 1e9),
	KINT(balancer, eplb_window, 1, RLB_EPLB_WINDOW_MAX),
	KBOOL(balancer, reorder),
	KBOOL(balancer, replicate),
	KBOOL(balancer, data_control),
	KBOOL_AUTO(balancer, colocate),
	KBOOL(balancer, relay),
	KDBL(balancer, migration_weight, 0, 1e6),
	KDBL(balancer, migration_bytes_per_param, 0, 1024),
	KDBL(balancer, planner_overlap, 0, 1),
};

/*
 * The synthetic workload knobs (struct rlb_workload_config, defaults in
 * rlb_workload_defaults).  A new knob is a new row here, e.g.
 * KDBL(workload, knob, 0, 1), plus a line in man/relibra.yaml.5.
 */
static const struct key workload_keys[] = {
	KINT(workload, steps, 1, 100000),
	KINT(workload, first_step, 0, 1e9),
	KINT(workload, prompts_per_step, 1, 1e6),
	KINT(workload, samples_per_prompt, 1, 1024),
	KDBL(workload, len_median, 1, 1e6),
	KDBL(workload, len_sigma, 0, 5),
	KINT(workload, len_min, 1, 16777216),
	KINT(workload, len_max, 1, 16777216),
	KINT(workload, topics, 1, 4096),
	KDBL(workload, topic_concentration, 0, 1e6),
	KDBL(workload, topic_drift, 0, 1),
	KDBL(workload, base_skew, 0, 10),
	KDBL(workload, hot_expert_boost, 0, 1e6),
	KDBL(workload, heavy_layer_fraction, 0, 1),
	KDBL(workload, heavy_layer_skew, 0, 10),
	KINT(workload, segment_min, 1, INT_MAX),
	KINT(workload, segment_max, 1, INT_MAX),
	KDBL(workload, layer_correlation, 0, 1),
	KDBL(workload, token_noise, 0, 1),
	KDBL(workload, segment_concentration, 0, 1e6),
};

#define NELEM(a) (sizeof(a) / sizeof((a)[0]))

const struct section rlb_cfg_sections[NSECTIONS] = {
	{ "model", model_keys, NELEM(model_keys), "models",
	  offsetof(struct rlb_config, model), sizeof(struct rlb_model_config) },
	{ "cluster", cluster_keys, NELEM(cluster_keys), "clusters",
	  offsetof(struct rlb_config, cluster), sizeof(struct rlb_cluster_config) },
	{ "parallel", parallel_keys, NELEM(parallel_keys), NULL,
	  offsetof(struct rlb_config, parallel), sizeof(struct rlb_parallel_config) },
	{ "balancer", balancer_keys, NELEM(balancer_keys), NULL,
	  offsetof(struct rlb_config, balancer), sizeof(struct rlb_balancer_config) },
	{ "workload", workload_keys, NELEM(workload_keys), NULL,
	  offsetof(struct rlb_config, workload), sizeof(struct rlb_workload_config) },
};

_Static_assert(NELEM(model_keys) <= KEYS_MAX && NELEM(cluster_keys) <= KEYS_MAX &&
	       NELEM(parallel_keys) <= KEYS_MAX && NELEM(balancer_keys) <= KEYS_MAX &&
	       NELEM(workload_keys) <= KEYS_MAX, "raise KEYS_MAX");

/* ------------------------------------------------------------------ */
/* Lookups.                                                            */

int rlb_cfg_find_section(const char *name)
{
	int s;

	for (s = 0; s < NSECTIONS; s++)
		if (!strcmp(rlb_cfg_sections[s].name, name))
			return s;
	return -1;
}

int rlb_cfg_find_key(int sec, const char *name)
{
	size_t i;

	for (i = 0; i < rlb_cfg_sections[sec].nkeys; i++)
		if (!strcmp(rlb_cfg_sections[sec].keys[i].name, name))
			return (int)i;
	return -1;
}

/* Key names of a section (plus "preset" where it takes one). */
size_t rlb_cfg_section_cands(int sec, const char **cands)
{
	size_t i, n = 0;

	for (i = 0; i < rlb_cfg_sections[sec].nkeys; i++)
		cands[n++] = rlb_cfg_sections[sec].keys[i].name;
	if (rlb_cfg_sections[sec].preset_kind)
		cands[n++] = "preset";
	return n;
}

void *rlb_cfg_field(struct rlb_config *cfg, const struct key *k)
{
	return (char *)cfg + k->offset;
}

const void *rlb_cfg_cfield(const struct rlb_config *cfg, const struct key *k)
{
	return (const char *)cfg + k->offset;
}

const char *rlb_cfg_type_text(const struct key *k, char *buf, size_t size)
{
	size_t i, n;

	switch (k->type) {
	case KT_INT: return "an integer";
	case KT_DOUBLE: return "a number";
	case KT_BOOL:
		return k->flags & KF_AUTO ? "a boolean (true or false) or auto" :
					    "a boolean (true or false)";
	case KT_STRING: return "a string";
	case KT_ENUM:
	case KT_CHOICE:
		n = (size_t)snprintf(buf, size, "one of");
		for (i = 0; k->choices[i] && n < size; i++)
			n += (size_t)snprintf(buf + n, size - n, "%s %s",
					      i ? "," : "", k->choices[i]);
		return buf;
	}
	return "a value";
}

void rlb_cfg_fmt_double(double v, char *buf, size_t size)
{
	int prec;

	for (prec = 15; prec <= 17; prec++) {
		snprintf(buf, size, "%.*g", prec, v);
		if (strtod(buf, NULL) == v)
			return;
	}
}

const char *rlb_cfg_range_text(const struct key *k, char *buf, size_t size)
{
	char lo[32], hi[32];

	if (k->type == KT_INT && k->max >= INT_MAX) {
		snprintf(buf, size, "(at least %.0f)", k->min);
		return buf;
	}
	rlb_cfg_fmt_double(k->min, lo, sizeof(lo));
	rlb_cfg_fmt_double(k->max, hi, sizeof(hi));
	snprintf(buf, size, "[%s, %s]", lo, hi);
	return buf;
}

int rlb_cfg_in_range(const struct key *k, double v)
{
	return !isnan(v) && v >= k->min && v <= k->max;
}

int rlb_cfg_enum_index(const struct key *k, int v)
{
	int i;

	for (i = 0; k->choices[i]; i++)
		if (k->values[i] == v)
			return i;
	return -1;
}

int rlb_cfg_choice_index(const char *const *choices, const char *s)
{
	int i;

	for (i = 0; choices[i]; i++)
		if (!strcmp(choices[i], s))
			return i;
	return -1;
}

/* ------------------------------------------------------------------ */
/* Public interface.                                                   */

void rlb_config_defaults(struct rlb_config *cfg)
{
	memset(cfg, 0, sizeof(*cfg));
	cfg->model.moe_layer_period = 1;
	cfg->model.gated_ffn = 1;
	cfg->cluster.nodes = 1;
	cfg->cluster.gpus_per_node = 8;
	cfg->cluster.peak_tflops = 989;
	cfg->cluster.hbm_gbps = 2700;
	cfg->cluster.gemm_eff_max = 0.70;
	cfg->cluster.gemm_eff_half_rows = 256;
	cfg->cluster.nvlink_gbps = 340;
	cfg->cluster.nvlink_latency_us = 20;
	cfg->cluster.rdma_gbps = 45;
	cfg->cluster.rdma_latency_us = 80;
	cfg->parallel.ep_size = 0;
	cfg->parallel.micro_batch_tokens = 8192;
	cfg->parallel.recompute = 0;
	cfg->parallel.pack = RLB_PACK_IN_ORDER;
	strcpy(cfg->balancer.policy, "relibra");
	cfg->balancer.replica_slots = 2;
	cfg->balancer.min_tokens_per_replica = 256;
	cfg->balancer.eplb_window = 4;
	cfg->balancer.reorder = 1;
	cfg->balancer.replicate = 1;
	cfg->balancer.colocate = RLB_CFG_AUTO;
	cfg->balancer.migration_weight = 2.0;
	cfg->balancer.migration_bytes_per_param = 14;
	cfg->balancer.planner_overlap = 1.0;
	rlb_workload_defaults(&cfg->workload);
}

int rlb_config_gpus(const struct rlb_config *cfg)
{
	return cfg->cluster.nodes * cfg->cluster.gpus_per_node;
}

int rlb_config_ep_size(const struct rlb_config *cfg)
{
	return cfg->parallel.ep_size > 0 ? cfg->parallel.ep_size : rlb_config_gpus(cfg);
}

int rlb_config_experts_per_gpu(const struct rlb_config *cfg)
{
	int ep = rlb_config_ep_size(cfg);

	return ep > 0 ? cfg->model.experts / ep : 0;
}

int rlb_config_ep_gpus_per_node(const struct rlb_config *cfg)
{
	int gpn = cfg->cluster.gpus_per_node, ep = rlb_config_ep_size(cfg);

	return gpn < ep ? gpn : ep;
}

int rlb_config_ep_nodes(const struct rlb_config *cfg)
{
	int gpn = rlb_config_ep_gpus_per_node(cfg);

	return gpn > 0 ? rlb_config_ep_size(cfg) / gpn : 0;
}

static long moe_period(const struct rlb_model_config *m)
{
	return m->moe_layer_period > 1 ? m->moe_layer_period : 1;
}

static const char *layer_pattern(const struct rlb_model_config *m)
{
	return memchr(m->layer_pattern, '\0', sizeof(m->layer_pattern)) &&
	       m->layer_pattern[0] ? m->layer_pattern : NULL;
}

long rlb_model_hidden_layers(const struct rlb_model_config *m)
{
	const char *pat = layer_pattern(m);

	if (pat)
		return (long)strlen(pat);
	return (long)m->first_dense_layers + (long)m->moe_layers * moe_period(m);
}

long rlb_model_dense_layers(const struct rlb_model_config *m)
{
	return rlb_model_hidden_layers(m) - m->moe_layers;
}

long rlb_model_moe_layer_index(const struct rlb_model_config *m, long j)
{
	const char *pat = layer_pattern(m);
	long i, n = 0;

	if (!pat)
		return m->first_dense_layers + j * moe_period(m) + m->moe_layer_offset;
	for (i = 0; pat[i]; i++)
		if (pat[i] == 'E' && n++ == j)
			return i;
	return i;	/* past the last MoE layer: the layer count */
}

long rlb_model_moe_layer_of(const struct rlb_model_config *m, long i)
{
	const char *pat = layer_pattern(m);
	long rel, j, n = 0;

	if (i < 0 || i >= rlb_model_hidden_layers(m))
		return -1;
	if (pat) {
		if (pat[i] != 'E')
			return -1;
		for (j = 0; j < i; j++)
			n += pat[j] == 'E';
		return n;
	}
	rel = i - m->first_dense_layers - m->moe_layer_offset;
	if (rel < 0 || rel % moe_period(m))
		return -1;
	return rel / moe_period(m);
}

long rlb_model_dense_before(const struct rlb_model_config *m, long j)
{
	if (layer_pattern(m)) {
		long at = rlb_model_moe_layer_index(m, j);

		return j == 0 ? at : at - rlb_model_moe_layer_index(m, j - 1) - 1;
	}
	if (j == 0)
		return m->first_dense_layers + m->moe_layer_offset;
	if (j >= m->moe_layers)
		return moe_period(m) - 1 - m->moe_layer_offset;
	return moe_period(m) - 1;
}

enum rlb_block rlb_model_layer_block(const struct rlb_model_config *m, long i)
{
	const char *pat = layer_pattern(m);

	if (!pat || i < 0 || i >= (long)strlen(pat))
		return RLB_BLOCK_DECODER;
	switch (pat[i]) {
	case 'E': return RLB_BLOCK_MOE;
	case '-': return RLB_BLOCK_MLP;
	case 'M': return RLB_BLOCK_MAMBA;
	default: return RLB_BLOCK_ATTENTION;
	}
}

long rlb_layer_pattern_scan(const char *p, size_t len, long *moe)
{
	size_t i;

	*moe = 0;
	for (i = 0; i < len; i++) {
		if (!memchr("EM*-", p[i], 4))	/* NUL included: not a letter */
			return (long)i;
		*moe += p[i] == 'E';
	}
	return -1;
}

int rlb_model_ffn_matrices(const struct rlb_model_config *m)
{
	return m->gated_ffn ? 3 : 2;
}

int rlb_model_expert_width(const struct rlb_model_config *m)
{
	return m->moe_latent > 0 ? m->moe_latent : m->hidden;
}

enum rlb_attention rlb_model_layer_attention(const struct rlb_model_config *m, long i)
{
	int full_period = m->full_attention_period;

	if (full_period > 0 && (i + 1) % full_period == 0)
		return RLB_ATT_FULL;
	if (m->linear_value_heads > 0)
		return RLB_ATT_LINEAR;
	if (m->attention_chunk > 0)
		return RLB_ATT_CHUNK;
	return m->attention_window > 0 ? RLB_ATT_WINDOW : RLB_ATT_FULL;
}

const char *rlb_pack_name(enum rlb_pack pack)
{
	size_t i;

	for (i = 0; i < NELEM(pack_values); i++)
		if ((int)pack == pack_values[i])
			return pack_names[i];
	if (pack == RLB_PACK_DATA_CONTROL)
		return "data-control";
	if (pack == RLB_PACK_FILE)
		return "file";
	return "unknown";
}

int rlb_pack_from_name(const char *name, enum rlb_pack *pack, struct rlb_err *err)
{
	int i = rlb_cfg_choice_index(pack_names, name);

	if (i < 0)
		return rlb_err_set(err, RLB_EINVAL,
				   "unknown packing rule '%s' (expected in-order, ffd or dynamic)",
				   name);
	*pack = (enum rlb_pack)pack_values[i];
	return 0;
}

/*
 * A double-quoted YAML string that loads back as it was: C0 and C1
 * controls, U+FFFE and U+FFFF are escaped, as a reader refuses them raw
 * (or, NEL U+0085, folds it as a line break).  YAML's \xNN is the code
 * point U+00NN, not a byte.
 */
static void put_string(FILE *fp, const char *s)
{
	const unsigned char *u = (const unsigned char *)s;

	fputc('"', fp);
	for (; *u; u++) {
		if (*u == '"' || *u == '\\')
			fprintf(fp, "\\%c", *u);
		else if (*u < 0x20 || *u == 0x7f)
			fprintf(fp, "\\x%02x", *u);
		else if (u[0] == 0xc2 && u[1] >= 0x80 && u[1] <= 0x9f)
			fprintf(fp, "\\x%02x", *++u);
		else if (u[0] == 0xef && u[1] == 0xbf && (u[2] == 0xbe || u[2] == 0xbf)) {
			fprintf(fp, "\\u%s", u[2] == 0xbe ? "fffe" : "ffff");
			u += 2;
		} else
			fputc(*u, fp);
	}
	fputc('"', fp);
}

const char *rlb_cfg_value_text(const struct rlb_config *cfg, const struct key *k,
			       char *num, size_t size)
{
	const void *p = rlb_cfg_cfield(cfg, k);
	int v;

	switch (k->type) {
	case KT_INT:
		snprintf(num, size, "%d", *(const int *)p);
		return num;
	case KT_DOUBLE:
		rlb_cfg_fmt_double(*(const double *)p, num, size);
		return num;
	case KT_BOOL:
		if (*(const int *)p == RLB_CFG_AUTO)
			return "auto";
		return *(const int *)p ? "true" : "false";
	case KT_STRING:
		return memchr(p, '\0', (size_t)k->max + 1) ? p : "";
	case KT_CHOICE:
		return memchr(p, '\0', RLB_NAME_MAX) &&
		       rlb_cfg_choice_index(k->choices, p) >= 0 ? (const char *)p : "";
	case KT_ENUM:
		v = rlb_cfg_enum_index(k, *(const int *)p);
		return v >= 0 ? k->choices[v] : "";
	}
	return "";
}

static int config_write_yaml_c(const struct rlb_config *cfg, FILE *fp,
			       struct rlb_err *err)
{
	const struct key *k;
	char num[40];
	size_t i;
	int s;

	fprintf(fp, "# relibra configuration: every key with its effective value\n"
		    "# (man relibra.yaml.5)\n");
	for (s = 0; s < NSECTIONS; s++) {
		fprintf(fp, "%s:\n", rlb_cfg_sections[s].name);
		for (i = 0; i < rlb_cfg_sections[s].nkeys; i++) {
			k = &rlb_cfg_sections[s].keys[i];
			fprintf(fp, "  %s: ", k->name);
			if (k->type == KT_STRING)
				put_string(fp, rlb_cfg_value_text(cfg, k, num, sizeof(num)));
			else
				fputs(rlb_cfg_value_text(cfg, k, num, sizeof(num)), fp);
			fputc('\n', fp);
		}
	}
	if (fflush(fp) != 0 || ferror(fp))
		return rlb_err_errno(err, RLB_EIO, "cannot write the configuration");
	return 0;
}

/* config_write_yaml_c in the C locale (clocale.h) */
int rlb_config_write_yaml(const struct rlb_config *cfg, FILE *fp,
			  struct rlb_err *err)
{
	locale_t before = rlb_clocale_begin();
	int ret = config_write_yaml_c(cfg, fp, err);

	rlb_clocale_end(before);
	return ret;
}

static const char *names_models[256 + 1], *names_clusters[256 + 1], *names_full[256 + 1];
static pthread_once_t names_once = PTHREAD_ONCE_INIT;

static void names_init(void)
{
	const struct rlb_preset *p;
	size_t nm = 0, nc = 0, nf = 0;

	for (p = rlb_presets; p->name; p++) {
		if (!strcmp(p->kind, "models") && nm < 256)
			names_models[nm++] = p->name;
		else if (!strcmp(p->kind, "clusters") && nc < 256)
			names_clusters[nc++] = p->name;
		else if (!*p->kind && nf < 256)
			names_full[nf++] = p->name;
	}
}

const char *const *rlb_config_preset_names(const char *kind)
{
	static const char *const none[] = { NULL };

	pthread_once(&names_once, names_init);
	if (!kind || !*kind)
		return names_full;
	if (!strcmp(kind, "models"))
		return names_models;
	if (!strcmp(kind, "clusters"))
		return names_clusters;
	return none;
}
