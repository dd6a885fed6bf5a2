/*
 * config.c - the YAML configuration: defaults, presets, --set overrides and
 * validation.  A libyaml document is walked with one table of keys per
 * section; every error names file:line:col, the YAML path, and shows the
 * offending line with a caret (man/relibra.yaml.5).
 */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <yaml.h>

#include "capture.h"
#include "config.h"
#include "preset.h"

#define CONFIG_BYTES_MAX (1u << 20)	/* larger files are not configs */
#define PRESET_DEPTH_MAX 16
#define KEYS_MAX 48			/* rows per section */
#define SHOW_MAX 48			/* bytes of a value quoted in messages */
#define LINE_SHOW_MAX 160		/* bytes of a source line shown */
#define NESTING_MAX 64			/* flow collections inside each other */

enum key_type {
	KT_INT,		/* int */
	KT_DOUBLE,	/* double, finite */
	KT_BOOL,	/* int 0/1: true/false, yes/no, on/off */
	KT_STRING,	/* char[max + 1] */
	KT_ENUM,	/* int index into choices */
	KT_CHOICE,	/* char[RLB_NAME_MAX] holding one of choices */
};

#define KF_REQUIRED 1u	/* 0 means "not given": an error */
#define KF_OPEN_MIN 2u	/* the value must be greater than min */

/*
 * One configuration key: its name inside the section, type, place in
 * struct rlb_config and allowed range (for strings, max is the length
 * bound).  Rows are written with the K* macros below.
 */
struct key {
	const char *name;
	enum key_type type;
	size_t offset;
	double min, max;
	unsigned flags;
	const char *const *choices;	/* KT_ENUM, KT_CHOICE; NULL-terminated */
};

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
#define KPOS(sec, f, hi) \
	{ .name = #f, .type = KT_DOUBLE, .offset = OFF(sec, f), .min = 0, .max = (hi), \
	  .flags = KF_OPEN_MIN }
#define KBOOL(sec, f) \
	{ .name = #f, .type = KT_BOOL, .offset = OFF(sec, f), .min = 0, .max = 1 }
#define KSTR(sec, f) \
	{ .name = #f, .type = KT_STRING, .offset = OFF(sec, f), .min = 0, \
	  .max = FIELD_SIZE(sec, f) - 1 }
#define KENUM(sec, f, names) \
	{ .name = #f, .type = KT_ENUM, .offset = OFF(sec, f), .choices = (names) }
#define KCHOICE(sec, f, names) \
	{ .name = #f, .type = KT_CHOICE, .offset = OFF(sec, f), .choices = (names) }

static const char *const pack_names[] = { "in-order", "ffd", NULL };
static const char *const policy_names[] = {
	"static", "eplb", "eplb-oracle", "replicate", "relibra", "ideal", NULL
};

_Static_assert(sizeof(enum rlb_pack) == sizeof(int), "enum rlb_pack is stored as int");
_Static_assert(FIELD_SIZE(balancer, policy) == RLB_NAME_MAX, "policy buffer");

static const struct key model_keys[] = {
	KSTR(model, name),
	KREQ(model, experts, 1, 65536),
	KREQ(model, topk, 1, 1024),
	KREQ(model, hidden, 1, 1048576),
	KREQ(model, expert_ffn, 1, 1048576),
	KREQ(model, moe_layers, 1, 4096),
	KINT(model, first_dense_layers, 0, 4096),
	KINT(model, dense_ffn, 0, 1048576),
	KINT(model, shared_experts, 0, 64),
	KINT(model, shared_expert_ffn, 0, 1048576),
	KINT(model, expert_groups, 0, 65536),
	KINT(model, topk_groups, 0, 65536),
	KINT(model, q_heads, 0, 4096),
	KINT(model, kv_heads, 0, 4096),
	KINT(model, head_dim, 0, 4096),
	KDBL(model, dense_time_ms, 0, 1e6),
};

static const struct key cluster_keys[] = {
	KSTR(cluster, name),
	KINT(cluster, nodes, 1, 4096),
	KINT(cluster, gpus_per_node, 1, 64),
	KPOS(cluster, peak_tflops, 1e6),
	KPOS(cluster, hbm_gbps, 1e6),
	KPOS(cluster, gemm_eff_max, 1),
	KDBL(cluster, gemm_eff_half_rows, 0, 1e6),
	KPOS(cluster, nvlink_gbps, 1e6),
	KDBL(cluster, nvlink_latency_us, 0, 1e6),
	KPOS(cluster, rdma_gbps, 1e6),
	KDBL(cluster, rdma_latency_us, 0, 1e6),
};

static const struct key parallel_keys[] = {
	KINT(parallel, ep_size, 0, 262144),
	KINT(parallel, micro_batch_tokens, 1, 16777216),
	KBOOL(parallel, recompute),
	KENUM(parallel, pack, pack_names),
};

static const struct key balancer_keys[] = {
	KCHOICE(balancer, policy, policy_names),
	KINT(balancer, replica_slots, 0, 64),
	KINT(balancer, min_tokens_per_replica, 0, 1e9),
	KINT(balancer, eplb_window, 1, 1000),
	KBOOL(balancer, reorder),
	KBOOL(balancer, replicate),
	KBOOL(balancer, data_control),
	KBOOL(balancer, colocate),
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

struct section {
	const char *name;
	const struct key *keys;
	size_t nkeys;
	const char *preset_kind;	/* "models", "clusters" or NULL */
	size_t offset, size;		/* of the section's struct */
};

enum { SEC_MODEL, SEC_CLUSTER, SEC_PARALLEL, SEC_BALANCER, SEC_WORKLOAD, NSECTIONS };

static const struct section sections[NSECTIONS] = {
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
/* The loader: sources read so far and where each key was last set.  */

enum src_kind { SRC_FILE, SRC_PRESET, SRC_SET };

struct source {
	enum src_kind kind;
	const char *name;	/* path for messages, or the --set assignment */
	const char *text;	/* the YAML (NULL for --set) */
	size_t len;
	const char *root;	/* directory for preset files; NULL: built-ins only */
	char *owned_name, *owned_text, *owned_root;
};

struct mark {
	int src;		/* index into srcs; -1: default value */
	int origin;		/* the config file or --set that led to src */
	int line, col;		/* 1-based; 0 when the source has no lines */
};

struct loader {
	struct rlb_config *cfg;
	struct rlb_err *err;
	const char *top_name;	/* the config path for defaults' errors, or NULL */
	struct source *srcs;
	size_t nsrcs, cap;
	struct mark marks[NSECTIONS][KEYS_MAX];
	struct mark section_marks[NSECTIONS];
	const char *stack_kind[PRESET_DEPTH_MAX];
	const char *stack_name[PRESET_DEPTH_MAX];
	int depth;
	int origin;		/* the config file or --set being applied */
};

static void clear_marks(struct mark *m, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++) {
		m[i].src = m[i].origin = -1;
		m[i].line = m[i].col = 0;
	}
}

static void loader_init(struct loader *ld, struct rlb_config *cfg,
			const char *top_name, struct rlb_err *err)
{
	int s;

	memset(ld, 0, sizeof(*ld));
	ld->cfg = cfg;
	ld->err = err;
	ld->top_name = top_name && *top_name ? top_name : NULL;
	for (s = 0; s < NSECTIONS; s++)
		clear_marks(ld->marks[s], KEYS_MAX);
	clear_marks(ld->section_marks, NSECTIONS);
}

static void loader_release(struct loader *ld)
{
	size_t i;

	for (i = 0; i < ld->nsrcs; i++) {
		free(ld->srcs[i].owned_name);
		free(ld->srcs[i].owned_text);
		free(ld->srcs[i].owned_root);
	}
	free(ld->srcs);
	ld->srcs = NULL;
	ld->nsrcs = ld->cap = 0;
}

/* Append a source; takes ownership of the owned_* pointers in *s. */
static int add_source(struct loader *ld, struct source *s)
{
	if (ld->nsrcs == ld->cap) {
		size_t cap = ld->cap ? 2 * ld->cap : 8;
		struct source *n = realloc(ld->srcs, cap * sizeof(*n));

		if (!n) {
			free(s->owned_name);
			free(s->owned_text);
			free(s->owned_root);
			return rlb_err_set(ld->err, RLB_ENOMEM, "out of memory");
		}
		ld->srcs = n;
		ld->cap = cap;
	}
	ld->srcs[ld->nsrcs] = *s;
	return (int)ld->nsrcs++;
}

/* ------------------------------------------------------------------ */
/* Messages.                                                           */

/* Copy up to SHOW_MAX bytes of s for quoting, control bytes as '?'. */
static const char *show(const char *s, size_t len, char *buf, size_t size)
{
	size_t i, n = len < SHOW_MAX ? len : SHOW_MAX;

	if (n > size - 4)
		n = size - 4;
	for (i = 0; i < n; i++)
		buf[i] = (unsigned char)s[i] < 0x20 || s[i] == 0x7f ? '?' : s[i];
	if (n < len)
		memcpy(buf + n, "...", 4);
	else
		buf[n] = '\0';
	return buf;
}

/*
 * "\n  <source line>\n  <caret>" for 1-based LINE and character column
 * COL of TEXT, or "" when the line is not there or too long to show.
 */
static void snippet(const char *text, size_t len, int line, int col,
		    char *out, size_t size)
{
	const char *p = text, *end = text + len, *eol;
	size_t n = 0, linelen, i;
	int l, c;

	out[0] = '\0';
	if (!text || line < 1 || col < 1)
		return;
	for (l = 1; l < line; l++) {
		p = memchr(p, '\n', (size_t)(end - p));
		if (!p)
			return;
		p++;
	}
	for (eol = p; eol < end && *eol != '\n' && *eol != '\r'; eol++)
		;
	linelen = (size_t)(eol - p);
	if (linelen > LINE_SHOW_MAX || size < 2 * linelen + 8)
		return;
	n += (size_t)snprintf(out + n, size - n, "\n  ");
	for (i = 0; i < linelen; i++)
		out[n++] = (unsigned char)p[i] < 0x20 && p[i] != '\t' ? '?' : p[i];
	n += (size_t)snprintf(out + n, size - n, "\n  ");
	/* columns count characters: skip UTF-8 continuation bytes */
	for (i = 0, c = 1; i < linelen && c < col; i++) {
		if (((unsigned char)p[i] & 0xc0) == 0x80)
			continue;
		out[n++] = p[i] == '\t' ? '\t' : ' ';
		c++;
	}
	if (c < col) {	/* past the end of the line (an empty value) */
		for (; c < col && n < size - 2; c++)
			out[n++] = ' ';
	}
	out[n++] = '^';
	out[n] = '\0';
}

/* Record a configuration error at LINE:COL (1-based; 0: none) of source SI. */
static int vfail(struct loader *ld, int si, int line, int col,
		 const char *fmt, va_list ap)
{
	char body[RLB_ERR_MSG_MAX], snip[2 * LINE_SHOW_MAX + 16];
	const struct source *s = si >= 0 ? &ld->srcs[si] : NULL;
	const char *name = s ? s->name : ld->top_name;

	vsnprintf(body, sizeof(body), fmt, ap);
	if (s && s->kind == SRC_SET)
		return rlb_err_set(ld->err, RLB_ECONFIG, "--set '%s': %s", name, body);
	if (!name)
		return rlb_err_set(ld->err, RLB_ECONFIG, "%s", body);
	if (!s || line < 1)
		return rlb_err_set(ld->err, RLB_ECONFIG, "%s: %s", name, body);
	snippet(s->text, s->len, line, col, snip, sizeof(snip));
	return rlb_err_set(ld->err, RLB_ECONFIG, "%s:%d:%d: %s%s", name, line,
			   col, body, snip);
}

__attribute__((format(printf, 3, 4)))
static int fail_src(struct loader *ld, int si, const char *fmt, ...)
{
	va_list ap;
	int rc;

	va_start(ap, fmt);
	rc = vfail(ld, si, 0, 0, fmt, ap);
	va_end(ap);
	return rc;
}

__attribute__((format(printf, 5, 6)))
static int fail_at(struct loader *ld, int si, int line, int col,
		   const char *fmt, ...)
{
	va_list ap;
	int rc;

	va_start(ap, fmt);
	rc = vfail(ld, si, line, col, fmt, ap);
	va_end(ap);
	return rc;
}

__attribute__((format(printf, 4, 5)))
static int fail_mark(struct loader *ld, int si, const yaml_mark_t *m,
		     const char *fmt, ...)
{
	va_list ap;
	int rc;

	va_start(ap, fmt);
	rc = vfail(ld, si, m ? (int)m->line + 1 : 0, m ? (int)m->column + 1 : 0,
		   fmt, ap);
	va_end(ap);
	return rc;
}

static int edit_distance(const char *a, const char *b)
{
	size_t la = strlen(a), lb = strlen(b), i, j;
	int row[RLB_NAME_MAX + 1], prev, tmp, best;

	if (la > RLB_NAME_MAX || lb > RLB_NAME_MAX)
		return INT_MAX;
	for (j = 0; j <= lb; j++)
		row[j] = (int)j;
	for (i = 1; i <= la; i++) {
		prev = row[0];
		row[0] = (int)i;
		for (j = 1; j <= lb; j++) {
			tmp = row[j];
			best = prev + (a[i - 1] != b[j - 1]);
			if (row[j] + 1 < best)
				best = row[j] + 1;
			if (row[j - 1] + 1 < best)
				best = row[j - 1] + 1;
			row[j] = best;
			prev = tmp;
		}
	}
	return row[lb];
}

/* The closest candidate: edit distance <= 2, else a prefix match; or NULL. */
static const char *suggest(const char *word, const char *const *cands, size_t n)
{
	size_t i, wl = strlen(word), cl;
	const char *best = NULL;
	int d, bestd = 3;

	for (i = 0; i < n; i++) {
		d = edit_distance(word, cands[i]);
		if (d < bestd && d < (int)wl) {
			best = cands[i];
			bestd = d;
		}
	}
	if (best || wl < 2)
		return best;
	for (i = 0; i < n; i++) {
		cl = strlen(cands[i]);
		if (!strncmp(cands[i], word, wl) || (cl >= 3 && !strncmp(word, cands[i], cl)))
			return cands[i];
	}
	return NULL;
}

/* ------------------------------------------------------------------ */
/* Lookups.                                                            */

static int find_section(const char *name)
{
	int s;

	for (s = 0; s < NSECTIONS; s++)
		if (!strcmp(sections[s].name, name))
			return s;
	return -1;
}

static int find_key(int sec, const char *name)
{
	size_t i;

	for (i = 0; i < sections[sec].nkeys; i++)
		if (!strcmp(sections[sec].keys[i].name, name))
			return (int)i;
	return -1;
}

/* Key names of a section (plus "preset" where it takes one). */
static size_t section_cands(int sec, const char **cands)
{
	size_t i, n = 0;

	for (i = 0; i < sections[sec].nkeys; i++)
		cands[n++] = sections[sec].keys[i].name;
	if (sections[sec].preset_kind)
		cands[n++] = "preset";
	return n;
}

static void *field(struct rlb_config *cfg, const struct key *k)
{
	return (char *)cfg + k->offset;
}

static const void *cfield(const struct rlb_config *cfg, const struct key *k)
{
	return (const char *)cfg + k->offset;
}

static const char *type_text(const struct key *k, char *buf, size_t size)
{
	size_t i, n;

	switch (k->type) {
	case KT_INT: return "an integer";
	case KT_DOUBLE: return "a number";
	case KT_BOOL: return "a boolean (true or false)";
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

static void fmt_double(double v, char *buf, size_t size)
{
	int prec;

	for (prec = 15; prec <= 17; prec++) {
		snprintf(buf, size, "%.*g", prec, v);
		if (strtod(buf, NULL) == v)
			return;
	}
}

static const char *range_text(const struct key *k, char *buf, size_t size)
{
	char lo[32], hi[32];

	if (k->type == KT_INT && k->max >= INT_MAX) {
		snprintf(buf, size, "(at least %.0f)", k->min);
		return buf;
	}
	fmt_double(k->min, lo, sizeof(lo));
	fmt_double(k->max, hi, sizeof(hi));
	snprintf(buf, size, "%s%s, %s]", k->flags & KF_OPEN_MIN ? "(" : "[", lo, hi);
	return buf;
}

static int in_range(const struct key *k, double v)
{
	if (isnan(v) || v > k->max)
		return 0;
	return k->flags & KF_OPEN_MIN ? v > k->min : v >= k->min;
}

/* ------------------------------------------------------------------ */
/* Scalars.                                                            */

/* A YAML value as the setters see it, from a file node or a --set. */
struct value {
	yaml_node_type_t type;	/* scalar, mapping or sequence */
	const char *s;		/* scalar text */
	size_t len;
	int null;		/* empty, ~ or null, unquoted */
	const yaml_mark_t *mark;	/* NULL for --set */
};

static const char *kind_text(const struct value *v)
{
	if (v->type == YAML_MAPPING_NODE)
		return "a mapping";
	if (v->type == YAML_SEQUENCE_NODE)
		return "a sequence";
	return "an empty value";
}

static void node_value(yaml_node_t *n, struct value *v)
{
	memset(v, 0, sizeof(*v));
	v->type = n->type;
	v->mark = &n->start_mark;
	if (n->type != YAML_SCALAR_NODE)
		return;
	v->s = (const char *)n->data.scalar.value;
	v->len = n->data.scalar.length;
	v->null = n->data.scalar.style == YAML_PLAIN_SCALAR_STYLE &&
		  (!v->len || !strcmp(v->s, "~") || !strcmp(v->s, "null") ||
		   !strcmp(v->s, "Null") || !strcmp(v->s, "NULL"));
}

static int parse_int(const char *s, long long *out)
{
	const char *p = s;
	char *end;

	if (*p == '+' || *p == '-')
		p++;
	if (*p < '0' || *p > '9')
		return -1;
	for (; *p; p++)
		if (*p < '0' || *p > '9')
			return -1;
	errno = 0;
	*out = strtoll(s, &end, 10);
	if (errno == ERANGE)
		*out = *s == '-' ? LLONG_MIN : LLONG_MAX;
	return 0;
}

static int parse_double(const char *s, double *out)
{
	const char *p;
	char *end;
	int digit = 0;

	for (p = s; *p; p++) {
		if (*p >= '0' && *p <= '9')
			digit = 1;
		else if (!strchr("+-.eE", *p))
			return -1;
	}
	if (!digit)
		return -1;
	*out = strtod(s, &end);
	if (end == s || *end || !isfinite(*out))
		return -1;
	return 0;
}

static int parse_bool(const char *s, int *out)
{
	static const char *const t[] = { "true", "yes", "on" };
	static const char *const f[] = { "false", "no", "off" };
	size_t i;

	for (i = 0; i < 3; i++) {
		if (!strcasecmp(s, t[i])) {
			*out = 1;
			return 0;
		}
		if (!strcasecmp(s, f[i])) {
			*out = 0;
			return 0;
		}
	}
	return -1;
}

static int choice_index(const char *const *choices, const char *s)
{
	int i;

	for (i = 0; choices[i]; i++)
		if (!strcmp(choices[i], s))
			return i;
	return -1;
}

/* Parse V as key K of section SEC, check its range, store it, record where. */
static int set_value(struct loader *ld, int si, int sec, int ki,
		     const struct value *v, const yaml_mark_t *keymark)
{
	const struct key *k = &sections[sec].keys[ki];
	const char *sname = sections[sec].name;
	char types[128], shown[SHOW_MAX + 4], range[96];
	void *dst = field(ld->cfg, k);
	long long ll = 0;
	double d = 0;
	int b = 0, idx;
	const char *sug;

	if (v->type == YAML_MAPPING_NODE || v->type == YAML_SEQUENCE_NODE ||
	    (v->null && k->type != KT_STRING) || !v->s)
		return fail_mark(ld, si, v->mark, "expected %s for '%s.%s', got %s",
				 type_text(k, types, sizeof(types)), sname,
				 k->name, kind_text(v));
	show(v->s, v->len, shown, sizeof(shown));
	if (memchr(v->s, '\0', v->len))
		return fail_mark(ld, si, v->mark,
				 "value for '%s.%s' holds a NUL character",
				 sname, k->name);
	switch (k->type) {
	case KT_INT:
		if (parse_int(v->s, &ll))
			goto bad_type;
		d = ll < -1e18 ? -1e18 : ll > 1e18 ? 1e18 : (double)ll;
		if (!in_range(k, d))
			goto bad_range;
		*(int *)dst = (int)ll;
		break;
	case KT_DOUBLE:
		if (parse_double(v->s, &d))
			goto bad_type;
		if (!in_range(k, d))
			goto bad_range;
		*(double *)dst = d;
		break;
	case KT_BOOL:
		if (parse_bool(v->s, &b))
			goto bad_type;
		*(int *)dst = b;
		break;
	case KT_STRING:
		if (v->null) {
			memset(dst, 0, (size_t)k->max + 1);
			break;
		}
		if (v->len > (size_t)k->max)
			return fail_mark(ld, si, v->mark,
					 "value '%s' for '%s.%s' is too long (at most %.0f bytes)",
					 shown, sname, k->name, k->max);
		memset(dst, 0, (size_t)k->max + 1);
		memcpy(dst, v->s, v->len);
		break;
	case KT_ENUM:
	case KT_CHOICE:
		idx = choice_index(k->choices, v->s);
		if (idx < 0) {
			size_t n = 0;

			while (k->choices[n])
				n++;
			sug = suggest(v->s, k->choices, n);
			return fail_mark(ld, si, v->mark,
					 "expected %s for '%s.%s', got '%s'%s%s%s",
					 type_text(k, types, sizeof(types)), sname,
					 k->name, shown, sug ? " (did you mean '" : "",
					 sug ? sug : "", sug ? "'?)" : "");
		}
		if (k->type == KT_ENUM) {
			*(int *)dst = idx;
		} else {
			memset(dst, 0, RLB_NAME_MAX);
			memcpy(dst, k->choices[idx], strlen(k->choices[idx]));
		}
		break;
	}
	ld->marks[sec][ki].src = si;
	ld->marks[sec][ki].origin = ld->origin;
	ld->marks[sec][ki].line = keymark ? (int)keymark->line + 1 : 0;
	ld->marks[sec][ki].col = keymark ? (int)keymark->column + 1 : 0;
	return 0;

bad_type:
	return fail_mark(ld, si, v->mark, "expected %s for '%s.%s', got '%s'",
			 type_text(k, types, sizeof(types)), sname, k->name, shown);
bad_range:
	return fail_mark(ld, si, v->mark, "value %s for '%s.%s' is out of range %s",
			 shown, sname, k->name, range_text(k, range, sizeof(range)));
}

/* ------------------------------------------------------------------ */
/* Files, presets and documents.                                       */

static int apply_root(struct loader *ld, int si, yaml_document_t *doc, int only);

/* The directory part of PATH ("." when none), allocated; NULL when out of memory. */
static char *dir_of(const char *path)
{
	const char *slash = strrchr(path, '/');
	size_t n = slash ? (size_t)(slash - path) : 0;
	char *d;

	if (!slash)
		return strdup(".");
	if (n == 0)
		n = 1;	/* the root directory */
	d = malloc(n + 1);
	if (d) {
		memcpy(d, path, n);
		d[n] = '\0';
	}
	return d;
}

/* Read PATH into a new source; ENOENT is reported as RLB_ENOTFOUND. */
static int read_source(struct loader *ld, const char *path, const char *what,
		       enum src_kind kind, const char *root)
{
	struct source s = { kind, NULL, NULL, 0, NULL, NULL, NULL, NULL };
	FILE *fp = fopen(path, "rb");
	size_t cap = 4096, n = 0, got;
	char *buf = NULL, *nb;
	int rc;

	if (!fp)
		return rlb_err_errno(ld->err, errno == ENOENT ? RLB_ENOTFOUND : RLB_EIO,
				     "cannot open %s '%s'", what, path);
	for (;;) {
		if (n + 1 >= cap || !buf) {
			cap *= 2;
			nb = realloc(buf, cap);
			if (!nb) {
				rc = rlb_err_set(ld->err, RLB_ENOMEM, "out of memory");
				goto fail;
			}
			buf = nb;
		}
		got = fread(buf + n, 1, cap - n - 1, fp);
		n += got;
		if (n > CONFIG_BYTES_MAX) {
			rc = rlb_err_set(ld->err, RLB_ECONFIG,
					 "%s: file is too large for a config (over %u bytes)",
					 path, CONFIG_BYTES_MAX);
			goto fail;
		}
		if (got == 0)
			break;
	}
	if (ferror(fp)) {
		rc = rlb_err_errno(ld->err, RLB_EIO, "cannot read %s '%s'", what, path);
		goto fail;
	}
	fclose(fp);
	buf[n] = '\0';
	s.owned_text = buf;
	s.owned_name = strdup(path);
	s.owned_root = root ? strdup(root) : dir_of(path);
	if (!s.owned_name || !s.owned_root) {
		free(s.owned_name);
		free(s.owned_root);
		free(buf);
		return rlb_err_set(ld->err, RLB_ENOMEM, "out of memory");
	}
	s.name = s.owned_name;
	s.text = buf;
	s.len = n;
	s.root = s.owned_root;
	return add_source(ld, &s);

fail:
	fclose(fp);
	free(buf);
	return rc;
}

/* 1-based line and character column of byte OFFSET in TEXT. */
static void offset_mark(const char *text, size_t len, size_t offset,
			yaml_mark_t *m)
{
	size_t i;

	m->index = offset;
	m->line = 0;
	m->column = 0;
	for (i = 0; i < offset && i < len; i++) {
		if (text[i] == '\n') {
			m->line++;
			m->column = 0;
		} else if (((unsigned char)text[i] & 0xc0) != 0x80) {
			m->column++;
		}
	}
}

static int syntax_error(struct loader *ld, int si, const yaml_parser_t *p)
{
	const struct source *s = &ld->srcs[si];
	yaml_mark_t m;

	if (p->error == YAML_MEMORY_ERROR)
		return rlb_err_set(ld->err, RLB_ENOMEM, "out of memory");
	if (p->error == YAML_READER_ERROR) {
		offset_mark(s->text ? s->text : "", s->len, p->problem_offset, &m);
		return fail_mark(ld, si, s->text ? &m : NULL,
				 "syntax error: %s at byte offset %zu",
				 p->problem ? p->problem : "unreadable input",
				 p->problem_offset);
	}
	if (p->context)
		return fail_mark(ld, si, s->text ? &p->problem_mark : NULL,
				 "syntax error: %s (%s at line %zu)",
				 p->problem ? p->problem : "invalid YAML",
				 p->context, p->context_mark.line + 1);
	return fail_mark(ld, si, s->text ? &p->problem_mark : NULL,
			 "syntax error: %s", p->problem ? p->problem : "invalid YAML");
}

/*
 * libyaml's scanner takes time quadratic in the depth of flow collections,
 * and a config nests three levels: refuse deep bracket nesting up front
 * (counting every bracket, quoted or not, errs only on absurd input).
 */
static int check_nesting(struct loader *ld, int si, const char *text, size_t len)
{
	yaml_mark_t m;
	size_t i;
	int depth = 0;

	for (i = 0; i < len; i++) {
		if (text[i] == '[' || text[i] == '{') {
			if (++depth > NESTING_MAX) {
				offset_mark(text, len, i, &m);
				return fail_mark(ld, si, ld->srcs[si].text ? &m : NULL,
						 "brackets nested more than %d deep",
						 NESTING_MAX);
			}
		} else if ((text[i] == ']' || text[i] == '}') && depth > 0) {
			depth--;
		}
	}
	return 0;
}

/* Parse TEXT (source SI's, or a --set value) as exactly one YAML document. */
static int parse_doc(struct loader *ld, int si, const char *text, size_t len,
		     yaml_document_t *doc)
{
	yaml_parser_t parser;
	yaml_document_t extra;
	yaml_node_t *root;
	int rc;

	rc = check_nesting(ld, si, text, len);
	if (rc < 0)
		return rc;
	if (!yaml_parser_initialize(&parser))
		return rlb_err_set(ld->err, RLB_ENOMEM, "out of memory");
	yaml_parser_set_input_string(&parser, (const unsigned char *)text, len);
	if (!yaml_parser_load(&parser, doc)) {
		rc = syntax_error(ld, si, &parser);
		goto out;
	}
	if (!yaml_parser_load(&parser, &extra)) {
		yaml_document_delete(doc);
		rc = syntax_error(ld, si, &parser);
		goto out;
	}
	root = yaml_document_get_root_node(&extra);
	if (root) {
		rc = fail_mark(ld, si, ld->srcs[si].text ? &root->start_mark : NULL,
			       "a second YAML document (a config holds one)");
		yaml_document_delete(doc);
	}
	yaml_document_delete(&extra);
out:
	yaml_parser_delete(&parser);
	return rc;
}

static int valid_preset_name(const char *s, size_t len)
{
	size_t i;

	if (!len || len >= RLB_NAME_MAX || s[0] == '.')
		return 0;
	for (i = 0; i < len; i++)
		if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= 'A' && s[i] <= 'Z') ||
		      (s[i] >= '0' && s[i] <= '9') || s[i] == '-' || s[i] == '_' ||
		      s[i] == '.'))
			return 0;
	return 1;
}

static const struct rlb_preset *builtin_preset(const char *kind, const char *name)
{
	const struct rlb_preset *p;

	for (p = rlb_presets; p->name; p++)
		if (!strcmp(p->kind, kind) && !strcmp(p->name, name))
			return p;
	return NULL;
}

static int unknown_preset(struct loader *ld, int si, const yaml_mark_t *m,
			  const char *kind, const char *what, const char *name)
{
	const char *const *names = rlb_config_preset_names(*kind ? kind : NULL);
	const char *sug, *other = NULL;
	char list[512];
	size_t n = 0, len = 0;

	if (!*kind && builtin_preset("models", name))
		other = "model";
	else if (!*kind && builtin_preset("clusters", name))
		other = "cluster";
	if (other)
		return fail_mark(ld, si, m, "unknown %s '%s' ('%s' is a %s preset: use '%s: {preset: %s}')",
				 what, name, name, other, other, name);
	while (names[n])
		n++;
	sug = suggest(name, names, n);
	if (sug)
		return fail_mark(ld, si, m, "unknown %s '%s' (did you mean '%s'?)",
				 what, name, sug);
	list[0] = '\0';
	for (n = 0; names[n] && len < sizeof(list); n++)
		len += (size_t)snprintf(list + len, sizeof(list) - len, "%s%s",
					n ? ", " : "", names[n]);
	return fail_mark(ld, si, m, "unknown %s '%s' (built in: %s)", what, name,
			 names[0] ? list : "none");
}

/*
 * Apply preset NAME of section SEC (or a full config when SEC < 0), named
 * in source SI at M: the section is reset to its defaults, then the
 * preset's keys are applied.  Built-in presets come first, then files
 * under the including source's root.
 */
static int apply_preset(struct loader *ld, int si, int sec, const char *name,
			size_t len, const yaml_mark_t *m)
{
	const char *kind = sec >= 0 ? sections[sec].preset_kind : "";
	const char *what = sec == SEC_MODEL ? "model preset" :
			   sec == SEC_CLUSTER ? "cluster preset" : "preset";
	const struct rlb_preset *p;
	struct source s = { SRC_PRESET, NULL, NULL, 0, NULL, NULL, NULL, NULL };
	struct rlb_config defaults;
	yaml_document_t doc;
	char shown[SHOW_MAX + 4], *path = NULL, chain[512];
	const char *root = ld->srcs[si].root;
	size_t n;
	int i, ni, rc;

	if (!valid_preset_name(name, len))
		return fail_mark(ld, si, m, "invalid %s name '%s' (letters, digits, '-', '_', '.')",
				 what, show(name, len, shown, sizeof(shown)));
	for (i = 0; i < ld->depth; i++) {
		if (strcmp(ld->stack_kind[i], kind) || strcmp(ld->stack_name[i], name))
			continue;
		for (n = 0, ni = i; ni < ld->depth && n < sizeof(chain); ni++)
			n += (size_t)snprintf(chain + n, sizeof(chain) - n, "'%s' -> ",
					      ld->stack_name[ni]);
		if (n < sizeof(chain))
			snprintf(chain + n, sizeof(chain) - n, "'%s'", name);
		return fail_mark(ld, si, m, "preset cycle: %s", chain);
	}
	if (ld->depth == PRESET_DEPTH_MAX)
		return fail_mark(ld, si, m, "presets nested more than %d deep",
				 PRESET_DEPTH_MAX);
	p = builtin_preset(kind, name);
	if (p) {
		s.name = p->path;
		s.text = p->text;
		s.len = strlen(p->text);
		rc = add_source(ld, &s);
	} else if (root) {
		size_t plen = strlen(root) + strlen(kind) + len + 16;

		path = malloc(plen);
		if (!path)
			return rlb_err_set(ld->err, RLB_ENOMEM, "out of memory");
		snprintf(path, plen, "%s/%s%s%s.yaml", root, kind, *kind ? "/" : "", name);
		rc = read_source(ld, path, "preset", SRC_PRESET, root);
		if (rc == RLB_ENOTFOUND)
			rc = unknown_preset(ld, si, m, kind, what, name);
		free(path);
	} else {
		rc = unknown_preset(ld, si, m, kind, what, name);
	}
	if (rc < 0)
		return rc;
	ni = rc;
	if (sec >= 0) {
		rlb_config_defaults(&defaults);
		memcpy((char *)ld->cfg + sections[sec].offset,
		       (char *)&defaults + sections[sec].offset, sections[sec].size);
		clear_marks(ld->marks[sec], KEYS_MAX);
	}
	rc = parse_doc(ld, ni, ld->srcs[ni].text, ld->srcs[ni].len, &doc);
	if (rc < 0)
		return rc;
	ld->stack_kind[ld->depth] = kind;
	ld->stack_name[ld->depth] = name;
	ld->depth++;
	rc = apply_root(ld, ni, &doc, sec);
	ld->depth--;
	yaml_document_delete(&doc);
	return rc;
}

static int preset_value(struct loader *ld, int si, int sec, yaml_node_t *n,
			const char *path)
{
	struct value v;

	node_value(n, &v);
	if (v.type != YAML_SCALAR_NODE || v.null)
		return fail_mark(ld, si, v.mark, "expected a preset name for '%s', got %s",
				 path, kind_text(&v));
	return apply_preset(ld, si, sec, v.s, v.len, v.mark);
}

/*
 * Check the keys of mapping MAP (path PREFIX, "" at the top): scalars,
 * no duplicates, each one of CANDS.
 */
static int check_keys(struct loader *ld, int si, yaml_document_t *doc,
		      yaml_node_t *map, const char *prefix,
		      const char *const *cands, size_t ncands, const char *note)
{
	yaml_node_pair_t *p, *q;
	yaml_node_t *k, *kq;
	char shown[SHOW_MAX + 4];
	const char *ks, *sug, *dot = *prefix ? "." : "";
	size_t i;

	for (p = map->data.mapping.pairs.start; p < map->data.mapping.pairs.top; p++) {
		k = yaml_document_get_node(doc, p->key);
		if (k->type != YAML_SCALAR_NODE)
			return fail_mark(ld, si, &k->start_mark,
					 "expected a plain key in '%s', got a %s",
					 *prefix ? prefix : "the top level",
					 k->type == YAML_MAPPING_NODE ? "mapping" : "sequence");
		ks = (const char *)k->data.scalar.value;
		show(ks, k->data.scalar.length, shown, sizeof(shown));
		for (i = 0; i < ncands; i++)
			if (strlen(ks) == k->data.scalar.length && !strcmp(ks, cands[i]))
				break;
		if (i == ncands) {
			sug = suggest(ks, cands, ncands);
			if (sug)
				return fail_mark(ld, si, &k->start_mark,
						 "unknown key '%s%s%s' (did you mean '%s'?)",
						 prefix, dot, shown, sug);
			return fail_mark(ld, si, &k->start_mark, "unknown key '%s%s%s'%s",
					 prefix, dot, shown, note ? note : "");
		}
		/* known keys only, so this scan is short */
		for (q = map->data.mapping.pairs.start; q < p; q++) {
			kq = yaml_document_get_node(doc, q->key);
			if (!strcmp((const char *)kq->data.scalar.value, ks))
				return fail_mark(ld, si, &k->start_mark,
						 "duplicate key '%s%s%s' (first at line %zu)",
						 prefix, dot, shown, kq->start_mark.line + 1);
		}
	}
	return 0;
}

static int apply_section(struct loader *ld, int si, yaml_document_t *doc,
			 int sec, yaml_node_t *map)
{
	const struct section *S = &sections[sec];
	const char *cands[KEYS_MAX + 1];
	char path[RLB_NAME_MAX + 16];
	yaml_node_pair_t *p;
	yaml_node_t *k, *vn;
	struct value v;
	size_t n = section_cands(sec, cands);
	int rc, ki;

	node_value(map, &v);
	if (v.null)
		return 0;
	if (map->type != YAML_MAPPING_NODE) {
		if (map->type == YAML_SCALAR_NODE && S->preset_kind)
			return fail_mark(ld, si, v.mark,
					 "expected a mapping for '%s', got a scalar (a preset is named with '%s: {preset: NAME}')",
					 S->name, S->name);
		return fail_mark(ld, si, v.mark, "expected a mapping for '%s', got %s",
				 S->name, map->type == YAML_SCALAR_NODE ? "a scalar" : "a sequence");
	}
	rc = check_keys(ld, si, doc, map, S->name, cands, n, NULL);
	if (rc < 0)
		return rc;
	/* The preset comes first wherever it is written; the keys override it. */
	for (p = map->data.mapping.pairs.start; p < map->data.mapping.pairs.top; p++) {
		k = yaml_document_get_node(doc, p->key);
		if (strcmp((const char *)k->data.scalar.value, "preset"))
			continue;
		snprintf(path, sizeof(path), "%s.preset", S->name);
		rc = preset_value(ld, si, sec, yaml_document_get_node(doc, p->value), path);
		if (rc < 0)
			return rc;
	}
	for (p = map->data.mapping.pairs.start; p < map->data.mapping.pairs.top; p++) {
		k = yaml_document_get_node(doc, p->key);
		ki = find_key(sec, (const char *)k->data.scalar.value);
		if (ki < 0)
			continue;	/* the preset */
		vn = yaml_document_get_node(doc, p->value);
		node_value(vn, &v);
		rc = set_value(ld, si, sec, ki, &v, &k->start_mark);
		if (rc < 0)
			return rc;
	}
	return 0;
}

/*
 * Apply a whole document of source SI.  ONLY >= 0: a model or cluster
 * preset, which holds that section alone.
 */
static int apply_root(struct loader *ld, int si, yaml_document_t *doc, int only)
{
	yaml_node_t *root = yaml_document_get_root_node(doc), *k;
	const char *cands[NSECTIONS + 1];
	char note[96];
	yaml_node_pair_t *p;
	struct value v;
	size_t n = 0;
	int s, rc;

	if (!root)
		return 0;
	node_value(root, &v);
	if (v.null)
		return 0;
	if (root->type != YAML_MAPPING_NODE)
		return fail_mark(ld, si, v.mark, "expected a mapping at the top level, got %s",
				 root->type == YAML_SCALAR_NODE ? "a scalar" : "a sequence");
	note[0] = '\0';
	if (only >= 0) {
		cands[n++] = sections[only].name;
		snprintf(note, sizeof(note), " (a %s preset holds only a '%s' section)",
			 sections[only].name, sections[only].name);
	} else {
		cands[n++] = "preset";
		for (s = 0; s < NSECTIONS; s++)
			cands[n++] = sections[s].name;
	}
	rc = check_keys(ld, si, doc, root, "", cands, n, note);
	if (rc < 0)
		return rc;
	for (p = root->data.mapping.pairs.start; p < root->data.mapping.pairs.top; p++) {
		k = yaml_document_get_node(doc, p->key);
		if (strcmp((const char *)k->data.scalar.value, "preset"))
			continue;
		rc = preset_value(ld, si, -1, yaml_document_get_node(doc, p->value), "preset");
		if (rc < 0)
			return rc;
	}
	for (p = root->data.mapping.pairs.start; p < root->data.mapping.pairs.top; p++) {
		k = yaml_document_get_node(doc, p->key);
		s = find_section((const char *)k->data.scalar.value);
		if (s < 0)
			continue;
		ld->section_marks[s].src = si;
		ld->section_marks[s].line = (int)k->start_mark.line + 1;
		ld->section_marks[s].col = (int)k->start_mark.column + 1;
		rc = apply_section(ld, si, doc, s, yaml_document_get_node(doc, p->value));
		if (rc < 0)
			return rc;
	}
	return 0;
}

/* ------------------------------------------------------------------ */
/* --set.                                                              */

/* Suggest a full key path for an unknown --set path. */
static const char *suggest_path(const char *path, char *buf, size_t size)
{
	const char *cands[NSECTIONS * (KEYS_MAX + 1)];
	char store[NSECTIONS * (KEYS_MAX + 1)][RLB_NAME_MAX + 16];
	const char *leaf = strrchr(path, '.'), *sug;
	size_t n = 0, i;
	int s;

	leaf = leaf ? leaf + 1 : path;
	for (s = 0; s < NSECTIONS; s++) {
		const char *names[KEYS_MAX + 1];
		size_t m = section_cands(s, names);

		for (i = 0; i < m; i++) {
			snprintf(store[n], sizeof(store[n]), "%s.%s", sections[s].name, names[i]);
			cands[n] = store[n];
			n++;
		}
	}
	for (i = 0; i < n; i++) {
		if (!strcmp(strchr(cands[i], '.') + 1, leaf) && strcmp(leaf, "preset")) {
			snprintf(buf, size, "%s", cands[i]);
			return buf;
		}
	}
	sug = suggest(path, cands, n);
	if (!sug)
		return NULL;
	snprintf(buf, size, "%s", sug);
	return buf;
}

static int apply_set(struct loader *ld, const char *assignment)
{
	struct source s = { SRC_SET, NULL, NULL, 0, NULL, NULL, NULL, NULL };
	const char *eq = strchr(assignment, '='), *val;
	char key[RLB_NAME_MAX * 2], sugbuf[RLB_NAME_MAX + 16], *dot, *name;
	const char *sug;
	yaml_document_t doc;
	yaml_node_t *root;
	struct value v;
	size_t klen;
	int si, sec, ki, rc;

	s.owned_name = strdup(assignment);
	if (!s.owned_name)
		return rlb_err_set(ld->err, RLB_ENOMEM, "out of memory");
	s.name = s.owned_name;
	if (ld->top_name) {
		s.owned_root = dir_of(ld->top_name);
		if (!s.owned_root) {
			free(s.owned_name);
			return rlb_err_set(ld->err, RLB_ENOMEM, "out of memory");
		}
		s.root = s.owned_root;
	}
	si = add_source(ld, &s);
	if (si < 0)
		return si;
	ld->origin = si;
	if (!eq)
		return fail_src(ld, si, "expected KEY=VALUE, e.g. parallel.micro_batch_tokens=4096");
	while (*assignment == ' ')
		assignment++;
	klen = (size_t)(eq - assignment);
	while (klen && assignment[klen - 1] == ' ')
		klen--;
	if (klen >= sizeof(key))
		return fail_src(ld, si, "unknown key (too long)");
	memcpy(key, assignment, klen);
	key[klen] = '\0';
	val = eq + 1;
	dot = strchr(key, '.');
	if (!dot) {
		if (!strcmp(key, "preset"))
			return fail_src(ld, si, "a full preset cannot be applied with --set (name it with 'preset:' in the config file)");
		sec = find_section(key);
		if (sec >= 0)
			return fail_src(ld, si, "'%s' is a section: set one of its keys, e.g. '%s.%s'",
					key, key, sections[sec].keys[sections[sec].nkeys > 1].name);
		sug = suggest_path(key, sugbuf, sizeof(sugbuf));
		return fail_src(ld, si, "unknown key '%s'%s%s%s", key,
				sug ? " (did you mean '" : "", sug ? sug : "", sug ? "'?)" : "");
	}
	*dot = '\0';
	name = dot + 1;
	sec = find_section(key);
	ki = sec >= 0 ? find_key(sec, name) : -1;
	*dot = '.';
	if (sec < 0 || (ki < 0 && !(sections[sec].preset_kind && !strcmp(name, "preset")))) {
		sug = suggest_path(key, sugbuf, sizeof(sugbuf));
		return fail_src(ld, si, "unknown key '%s'%s%s%s", key,
				sug ? " (did you mean '" : "", sug ? sug : "", sug ? "'?)" : "");
	}
	rc = parse_doc(ld, si, val, strlen(val), &doc);
	if (rc < 0)
		return rc;
	root = yaml_document_get_root_node(&doc);
	if (root) {
		node_value(root, &v);
		v.mark = NULL;
	} else {
		memset(&v, 0, sizeof(v));
		v.type = YAML_SCALAR_NODE;
		v.s = "";
		v.null = 1;
	}
	if (ki < 0) {
		if (v.type != YAML_SCALAR_NODE || v.null)
			rc = fail_src(ld, si, "expected a preset name for '%s', got %s",
				      key, kind_text(&v));
		else
			rc = apply_preset(ld, si, sec, v.s, v.len, NULL);
	} else {
		rc = set_value(ld, si, sec, ki, &v, NULL);
	}
	yaml_document_delete(&doc);
	return rc;
}

/* ------------------------------------------------------------------ */
/* Validation.                                                         */

#define KEY(sec, name) (sec), find_key((sec), (name))

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
				return vfail(ld, m->src, m->line, m->col, fmt, ap);
			if (pass == 1 && m->origin >= 0 &&
			    ld->srcs[m->origin].kind == SRC_SET)
				return vfail(ld, m->origin, 0, 0, fmt, ap);
			if (pass == 2)
				return vfail(ld, m->src, m->line, m->col, fmt, ap);
		}
	}
	return vfail(ld, -1, 0, 0, fmt, ap);
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
	const struct section *S = &sections[SEC_MODEL];
	const struct mark *m = &ld->section_marks[SEC_MODEL];
	char list[512];
	size_t i, len = 0;
	int missing = 0;

	list[0] = '\0';
	for (i = 0; i < S->nkeys; i++) {
		if (!(S->keys[i].flags & KF_REQUIRED) ||
		    *(const int *)cfield(ld->cfg, &S->keys[i]) != 0)
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
	return fail_at(ld, m->src, m->line, m->col, "missing required key%s %s",
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
		for (i = 0; i < sections[s].nkeys; i++) {
			k = &sections[s].keys[i];
			p = cfield(cfg, k);
			switch (k->type) {
			case KT_INT:
				if (in_range(k, *(const int *)p))
					continue;
				snprintf(num, sizeof(num), "%d", *(const int *)p);
				break;
			case KT_DOUBLE:
				if (in_range(k, *(const double *)p))
					continue;
				fmt_double(*(const double *)p, num, sizeof(num));
				break;
			case KT_BOOL:
				if (*(const int *)p == 0 || *(const int *)p == 1)
					continue;
				return fail_key(ld, s, (int)i, "'%s.%s' must be 0 or 1, not %d",
						sections[s].name, k->name, *(const int *)p);
			case KT_STRING:
				if (memchr(p, '\0', (size_t)k->max + 1))
					continue;
				return fail_key(ld, s, (int)i, "'%s.%s' is not terminated",
						sections[s].name, k->name);
			case KT_ENUM: {
				int v = *(const int *)p, n = 0;

				while (k->choices[n])
					n++;
				if (v >= 0 && v < n)
					continue;
				return fail_key(ld, s, (int)i, "'%s.%s' has no value %d",
						sections[s].name, k->name, v);
			}
			case KT_CHOICE:
				if (memchr(p, '\0', RLB_NAME_MAX) &&
				    choice_index(k->choices, p) >= 0)
					continue;
				return fail_key(ld, s, (int)i, "'%s.%s' is not one of its values",
						sections[s].name, k->name);
			}
			return fail_key(ld, s, (int)i, "value %s for '%s.%s' is out of range %s",
					num, sections[s].name, k->name,
					range_text(k, range, sizeof(range)));
		}
	}
	return 0;
}

static int validate(struct loader *ld)
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
	if (m->shared_experts && !m->shared_expert_ffn)
		return fail_keys2(ld, KEY(SEC_MODEL, "shared_experts"), KEY(SEC_MODEL, "shared_expert_ffn"),
				  "'model.shared_experts' %d needs 'model.shared_expert_ffn'",
				  m->shared_experts);
	if (m->first_dense_layers && !m->dense_ffn)
		return fail_keys2(ld, KEY(SEC_MODEL, "first_dense_layers"), KEY(SEC_MODEL, "dense_ffn"),
				  "'model.first_dense_layers' %d needs 'model.dense_ffn'",
				  m->first_dense_layers);
	if (m->q_heads && m->kv_heads && m->q_heads % m->kv_heads)
		return fail_keys2(ld, KEY(SEC_MODEL, "kv_heads"), KEY(SEC_MODEL, "q_heads"),
				  "'model.kv_heads' %d does not divide 'model.q_heads' %d",
				  m->kv_heads, m->q_heads);
	gpus = rlb_config_gpus(c);
	ep = c->parallel.ep_size ? c->parallel.ep_size : gpus;
	if (ep % c->cluster.gpus_per_node)
		return fail_keys2(ld, KEY(SEC_PARALLEL, "ep_size"), KEY(SEC_CLUSTER, "gpus_per_node"),
				  "'parallel.ep_size' %d is not a multiple of 'cluster.gpus_per_node' %d",
				  ep, c->cluster.gpus_per_node);
	if (ep > gpus)
		return fail_keys2(ld, KEY(SEC_PARALLEL, "ep_size"), KEY(SEC_CLUSTER, "nodes"),
				  "'parallel.ep_size' %d exceeds the cluster's %d GPUs ('cluster.nodes' %d x 'cluster.gpus_per_node' %d)",
				  ep, gpus, c->cluster.nodes, c->cluster.gpus_per_node);
	if (m->experts % ep)
		return fail_keys4(ld, KEY(SEC_MODEL, "experts"), KEY(SEC_PARALLEL, "ep_size"),
				  KEY(SEC_CLUSTER, "nodes"), KEY(SEC_CLUSTER, "gpus_per_node"),
				  "'model.experts' %d is not divisible by 'parallel.ep_size' %d",
				  m->experts, ep);
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

void rlb_config_defaults(struct rlb_config *cfg)
{
	memset(cfg, 0, sizeof(*cfg));
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
	cfg->balancer.migration_weight = 2.0;
	cfg->balancer.migration_bytes_per_param = 14;
	cfg->balancer.planner_overlap = 1.0;
	rlb_workload_defaults(&cfg->workload);
}

int rlb_config_load(struct rlb_config *cfg, const char *path,
		    const char *const *sets, size_t nsets, struct rlb_err *err)
{
	struct loader ld;
	yaml_document_t doc;
	size_t i;
	int rc = 0, si;

	rlb_config_defaults(cfg);
	if (path && strlen(path) >= RLB_PATH_MAX)
		return rlb_err_set(err, RLB_EINVAL, "config path is too long");
	if (path)
		memcpy(cfg->path, path, strlen(path) + 1);
	loader_init(&ld, cfg, path, err);
	if (path) {
		si = read_source(&ld, path, "config", SRC_FILE, NULL);
		if (si < 0) {
			rc = si == RLB_ENOTFOUND ? RLB_EIO : si;
			if (err)
				err->code = rc;
			goto out;
		}
		ld.origin = si;
		rc = parse_doc(&ld, si, ld.srcs[si].text, ld.srcs[si].len, &doc);
		if (rc < 0)
			goto out;
		rc = apply_root(&ld, si, &doc, -1);
		yaml_document_delete(&doc);
		if (rc < 0)
			goto out;
	}
	for (i = 0; i < nsets; i++) {
		rc = apply_set(&ld, sets[i]);
		if (rc < 0)
			goto out;
	}
	if (!cfg->parallel.ep_size)
		cfg->parallel.ep_size = rlb_config_gpus(cfg);
	rc = validate(&ld);
out:
	loader_release(&ld);
	if (rc < 0) {
		rlb_config_defaults(cfg);
		if (path)
			memcpy(cfg->path, path, strlen(path) + 1);
	}
	return rc;
}

int rlb_config_set(struct rlb_config *cfg, const char *assignment,
		   struct rlb_err *err)
{
	struct loader ld;
	int rc;

	loader_init(&ld, cfg, cfg->path, err);
	rc = apply_set(&ld, assignment);
	loader_release(&ld);
	return rc < 0 ? rc : 0;
}

int rlb_config_validate(const struct rlb_config *cfg, struct rlb_err *err)
{
	struct loader ld;
	int rc;

	/* The loader only reads through cfg here. */
	loader_init(&ld, (struct rlb_config *)cfg, cfg->path, err);
	rc = validate(&ld);
	loader_release(&ld);
	return rc;
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

int rlb_config_ep_nodes(const struct rlb_config *cfg)
{
	int gpn = cfg->cluster.gpus_per_node;

	return gpn > 0 ? rlb_config_ep_size(cfg) / gpn : 0;
}

const char *rlb_pack_name(enum rlb_pack pack)
{
	if ((int)pack >= 0 && (size_t)pack < NELEM(pack_names) - 1)
		return pack_names[pack];
	if (pack == RLB_PACK_DATA_CONTROL)
		return "data-control";
	if (pack == RLB_PACK_FILE)
		return "file";
	return "unknown";
}

int rlb_pack_from_name(const char *name, enum rlb_pack *pack, struct rlb_err *err)
{
	int i = choice_index(pack_names, name);

	if (i < 0)
		return rlb_err_set(err, RLB_EINVAL,
				   "unknown packing rule '%s' (expected in-order or ffd)",
				   name);
	*pack = (enum rlb_pack)i;
	return 0;
}

/* A double-quoted YAML string. */
static void put_string(FILE *fp, const char *s)
{
	fputc('"', fp);
	for (; *s; s++) {
		if (*s == '"' || *s == '\\')
			fprintf(fp, "\\%c", *s);
		else if ((unsigned char)*s < 0x20 || *s == 0x7f)
			fprintf(fp, "\\x%02x", (unsigned char)*s);
		else
			fputc(*s, fp);
	}
	fputc('"', fp);
}

int rlb_config_write_yaml(const struct rlb_config *cfg, FILE *fp,
			  struct rlb_err *err)
{
	const struct key *k;
	const void *p;
	char num[40];
	size_t i;
	int s, v, n;

	fprintf(fp, "# relibra configuration: every key with its effective value\n"
		    "# (man relibra.yaml.5)\n");
	for (s = 0; s < NSECTIONS; s++) {
		fprintf(fp, "%s:\n", sections[s].name);
		for (i = 0; i < sections[s].nkeys; i++) {
			k = &sections[s].keys[i];
			p = cfield(cfg, k);
			fprintf(fp, "  %s: ", k->name);
			switch (k->type) {
			case KT_INT:
				fprintf(fp, "%d", *(const int *)p);
				break;
			case KT_DOUBLE:
				fmt_double(*(const double *)p, num, sizeof(num));
				fputs(num, fp);
				break;
			case KT_BOOL:
				fputs(*(const int *)p ? "true" : "false", fp);
				break;
			case KT_STRING:
				put_string(fp, memchr(p, '\0', (size_t)k->max + 1) ? p : "");
				break;
			case KT_CHOICE:
				fputs(memchr(p, '\0', RLB_NAME_MAX) &&
				      choice_index(k->choices, p) >= 0 ? (const char *)p : "", fp);
				break;
			case KT_ENUM:
				v = *(const int *)p;
				for (n = 0; k->choices[n]; n++)
					;
				fputs(v >= 0 && v < n ? k->choices[v] : "", fp);
				break;
			}
			fputc('\n', fp);
		}
	}
	if (fflush(fp) != 0 || ferror(fp))
		return rlb_err_errno(err, RLB_EIO, "cannot write the configuration");
	return 0;
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
