/*
 * config.c - loading the YAML configuration: the config file, its presets
 * and --set overrides applied over the defaults, each libyaml document
 * walked with the tables of keys (config_keys.c), then validated
 * (config_check.c); sources and messages are config_source.c.  The
 * format is man/relibra.yaml.5.
 */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <yaml.h>

#include "clocale.h"
#include "config.h"
#include "config_impl.h"
#include "preset.h"
#include "util.h"

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

/* Whether S (LEN bytes), a plain scalar, is YAML's null: empty, ~ or null. */
static int plain_null(const char *s, size_t len)
{
	return !len || (len == 1 && *s == '~') ||
	       (len == 4 && (!memcmp(s, "null", 4) || !memcmp(s, "Null", 4) ||
			     !memcmp(s, "NULL", 4)));
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
	v->null = n->data.scalar.style == YAML_PLAIN_SCALAR_STYLE && plain_null(v->s, v->len);
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

/* Parse V as key K of section SEC, check its range, store it, record where. */
static int set_value(struct loader *ld, int si, int sec, int ki,
		     const struct value *v, const yaml_mark_t *keymark)
{
	const struct key *k = &rlb_cfg_sections[sec].keys[ki];
	const char *sname = rlb_cfg_sections[sec].name;
	char types[128], shown[SHOW_MAX + 4], range[96];
	void *dst = rlb_cfg_field(ld->cfg, k);
	long long ll = 0;
	double d = 0;
	int b = 0, idx;
	const char *sug;

	if (v->type == YAML_MAPPING_NODE || v->type == YAML_SEQUENCE_NODE ||
	    (v->null && k->type != KT_STRING) || !v->s)
		return rlb_cfg_fail_mark(ld, si, v->mark, "expected %s for '%s.%s', got %s",
					 rlb_cfg_type_text(k, types, sizeof(types)), sname,
					 k->name, kind_text(v));
	rlb_cfg_show(v->s, v->len, shown, sizeof(shown));
	if (memchr(v->s, '\0', v->len))
		return rlb_cfg_fail_mark(ld, si, v->mark,
					 "value for '%s.%s' holds a NUL character",
					 sname, k->name);
	switch (k->type) {
	case KT_INT:
		if (parse_int(v->s, &ll))
			goto bad_type;
		d = ll < -1e18 ? -1e18 : ll > 1e18 ? 1e18 : (double)ll;
		if (!rlb_cfg_in_range(k, d))
			goto bad_range;
		*(int *)dst = (int)ll;
		break;
	case KT_DOUBLE:
		if (parse_double(v->s, &d))
			goto bad_type;
		if (!rlb_cfg_in_range(k, d))
			goto bad_range;
		*(double *)dst = d == 0 ? 0 : d;	/* -0 is 0: printed so, and a divisor */
		break;
	case KT_BOOL:
		if ((k->flags & KF_AUTO) && !strcasecmp(v->s, "auto"))
			b = RLB_CFG_AUTO;
		else if (parse_bool(v->s, &b))
			goto bad_type;
		*(int *)dst = b;
		break;
	case KT_STRING:
		if (v->null) {
			memset(dst, 0, (size_t)k->max + 1);
			break;
		}
		if (v->len > (size_t)k->max)
			return rlb_cfg_fail_mark(ld, si, v->mark,
						 "value '%s' for '%s.%s' is too long (at most %.0f bytes)",
						 shown, sname, k->name, k->max);
		memset(dst, 0, (size_t)k->max + 1);
		memcpy(dst, v->s, v->len);
		/* a YAML file is UTF-8 already; a --set value may not be */
		if (!rlb_utf8_ok(dst))
			return rlb_cfg_fail_mark(ld, si, v->mark,
						 "value for '%s.%s' is not UTF-8 text",
						 sname, k->name);
		break;
	case KT_ENUM:
	case KT_CHOICE:
		idx = rlb_cfg_choice_index(k->choices, v->s);
		if (idx < 0) {
			size_t n = 0;

			while (k->choices[n])
				n++;
			sug = rlb_cfg_suggest(v->s, k->choices, n);
			return rlb_cfg_fail_mark(ld, si, v->mark,
						 "expected %s for '%s.%s', got '%s'%s%s%s",
						 rlb_cfg_type_text(k, types, sizeof(types)), sname,
						 k->name, shown, sug ? " (did you mean '" : "",
						 sug ? sug : "", sug ? "'?)" : "");
		}
		if (k->type == KT_ENUM) {
			*(int *)dst = k->values[idx];
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
	return rlb_cfg_fail_mark(ld, si, v->mark, "expected %s for '%s.%s', got '%s'",
				 rlb_cfg_type_text(k, types, sizeof(types)), sname, k->name, shown);
bad_range:
	/* past INT_MAX the range "(at least N)" would not say what is wrong */
	if (d > k->max && k->type == KT_INT && k->max >= INT_MAX)
		return rlb_cfg_fail_mark(ld, si, v->mark, "value %s for '%s.%s' is too large (at most %.0f)",
					 shown, sname, k->name, k->max);
	return rlb_cfg_fail_mark(ld, si, v->mark, "value %s for '%s.%s' is out of range %s",
				 shown, sname, k->name, rlb_cfg_range_text(k, range, sizeof(range)));
}

/* ------------------------------------------------------------------ */
/* Presets and documents.                                              */

static int apply_root(struct loader *ld, int si, yaml_document_t *doc, int only);

int rlb_cfg_preset_name_ok(const char *s, size_t len)
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
		return rlb_cfg_fail_mark(ld, si, m, "unknown %s '%s' ('%s' is a %s preset: use '%s: {preset: %s}')",
					 what, name, name, other, other, name);
	while (names[n])
		n++;
	sug = rlb_cfg_suggest(name, names, n);
	if (sug)
		return rlb_cfg_fail_mark(ld, si, m, "unknown %s '%s' (did you mean '%s'?)",
					 what, name, sug);
	list[0] = '\0';
	for (n = 0; names[n] && len < sizeof(list); n++)
		len += (size_t)snprintf(list + len, sizeof(list) - len, "%s%s",
					n ? ", " : "", names[n]);
	return rlb_cfg_fail_mark(ld, si, m, "unknown %s '%s' (built in: %s)", what, name,
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
	const char *kind = sec >= 0 ? rlb_cfg_sections[sec].preset_kind : "";
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

	if (!rlb_cfg_preset_name_ok(name, len))
		return rlb_cfg_fail_mark(ld, si, m, "invalid %s name '%s' (letters, digits, '-', '_', '.')",
					 what, rlb_cfg_show(name, len, shown, sizeof(shown)));
	for (i = 0; i < ld->depth; i++) {
		if (strcmp(ld->stack_kind[i], kind) || strcmp(ld->stack_name[i], name))
			continue;
		for (n = 0, ni = i; ni < ld->depth && n < sizeof(chain); ni++)
			n += (size_t)snprintf(chain + n, sizeof(chain) - n, "'%s' -> ",
					      ld->stack_name[ni]);
		if (n < sizeof(chain))
			snprintf(chain + n, sizeof(chain) - n, "'%s'", name);
		return rlb_cfg_fail_mark(ld, si, m, "preset cycle: %s", chain);
	}
	if (ld->depth == PRESET_DEPTH_MAX)
		return rlb_cfg_fail_mark(ld, si, m, "presets nested more than %d deep",
					 PRESET_DEPTH_MAX);
	p = builtin_preset(kind, name);
	if (p) {
		s.name = p->path;
		s.text = p->text;
		s.len = strlen(p->text);
		rc = rlb_cfg_add_source(ld, &s);
	} else if (root) {
		size_t plen = strlen(root) + strlen(kind) + len + 16;

		path = malloc(plen);
		if (!path)
			return rlb_err_set(ld->err, RLB_ENOMEM, "out of memory");
		snprintf(path, plen, "%s/%s%s%s.yaml", root, kind, *kind ? "/" : "", name);
		rc = rlb_cfg_read_source(ld, path, "preset", SRC_PRESET, root);
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
		memcpy((char *)ld->cfg + rlb_cfg_sections[sec].offset,
		       (char *)&defaults + rlb_cfg_sections[sec].offset, rlb_cfg_sections[sec].size);
		rlb_cfg_clear_marks(ld->marks[sec], KEYS_MAX);
	}
	rc = rlb_cfg_parse_doc(ld, ni, ld->srcs[ni].text, ld->srcs[ni].len, &doc);
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
		return rlb_cfg_fail_mark(ld, si, v.mark, "expected a preset name for '%s', got %s",
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
			return rlb_cfg_fail_mark(ld, si, &k->start_mark,
						 "expected a plain key %s%s%s, got a %s",
						 *prefix ? "in '" : "at the top level",
						 prefix, *prefix ? "'" : "",
						 k->type == YAML_MAPPING_NODE ? "mapping" : "sequence");
		ks = (const char *)k->data.scalar.value;
		rlb_cfg_show(ks, k->data.scalar.length, shown, sizeof(shown));
		for (i = 0; i < ncands; i++)
			if (strlen(ks) == k->data.scalar.length && !strcmp(ks, cands[i]))
				break;
		if (i == ncands) {
			sug = rlb_cfg_suggest(ks, cands, ncands);
			if (sug)
				return rlb_cfg_fail_mark(ld, si, &k->start_mark,
							 "unknown key '%s%s%s' (did you mean '%s'?)",
							 prefix, dot, shown, sug);
			return rlb_cfg_fail_mark(ld, si, &k->start_mark, "unknown key '%s%s%s'%s",
						 prefix, dot, shown, note ? note : "");
		}
		/* known keys only, so this scan is short */
		for (q = map->data.mapping.pairs.start; q < p; q++) {
			kq = yaml_document_get_node(doc, q->key);
			if (!strcmp((const char *)kq->data.scalar.value, ks))
				return rlb_cfg_fail_mark(ld, si, &k->start_mark,
							 "duplicate key '%s%s%s' (first at line %zu)",
							 prefix, dot, shown, kq->start_mark.line + 1);
		}
	}
	return 0;
}

static int apply_section(struct loader *ld, int si, yaml_document_t *doc,
			 int sec, yaml_node_t *map)
{
	const struct section *S = &rlb_cfg_sections[sec];
	const char *cands[KEYS_MAX + 1];
	char path[RLB_NAME_MAX + 16];
	yaml_node_pair_t *p;
	yaml_node_t *k, *vn;
	struct value v;
	size_t n = rlb_cfg_section_cands(sec, cands);
	int rc, ki;

	node_value(map, &v);
	if (v.null)
		return 0;
	if (map->type != YAML_MAPPING_NODE) {
		if (map->type == YAML_SCALAR_NODE && S->preset_kind)
			return rlb_cfg_fail_mark(ld, si, v.mark,
						 "expected a mapping for '%s', got a scalar (a preset is named with '%s: {preset: NAME}')",
						 S->name, S->name);
		return rlb_cfg_fail_mark(ld, si, v.mark, "expected a mapping for '%s', got %s",
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
		ki = rlb_cfg_find_key(sec, (const char *)k->data.scalar.value);
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
		return rlb_cfg_fail_mark(ld, si, v.mark, "expected a mapping at the top level, got %s",
					 root->type == YAML_SCALAR_NODE ? "a scalar" : "a sequence");
	note[0] = '\0';
	if (only >= 0) {
		cands[n++] = rlb_cfg_sections[only].name;
		snprintf(note, sizeof(note), " (a %s preset holds only a '%s' section)",
			 rlb_cfg_sections[only].name, rlb_cfg_sections[only].name);
	} else {
		cands[n++] = "preset";
		for (s = 0; s < NSECTIONS; s++)
			cands[n++] = rlb_cfg_sections[s].name;
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
		s = rlb_cfg_find_section((const char *)k->data.scalar.value);
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
		size_t m = rlb_cfg_section_cands(s, names);

		for (i = 0; i < m; i++) {
			snprintf(store[n], sizeof(store[n]), "%s.%s", rlb_cfg_sections[s].name, names[i]);
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
	sug = rlb_cfg_suggest(path, cands, n);
	if (!sug)
		return NULL;
	snprintf(buf, size, "%s", sug);
	return buf;
}

/*
 * A key of section SEC that an earlier --set gave, which a --set of the
 * section's preset would drop without a word: its index, or -1.
 */
static int earlier_set(const struct loader *ld, int sec)
{
	size_t k;

	for (k = 0; k < rlb_cfg_sections[sec].nkeys; k++)
		if (ld->marks[sec][k].src >= 0 &&
		    ld->srcs[ld->marks[sec][k].src].kind == SRC_SET)
			return (int)k;
	return -1;
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
		s.owned_root = rlb_cfg_dir_of(ld->top_name);
		if (!s.owned_root) {
			free(s.owned_name);
			return rlb_err_set(ld->err, RLB_ENOMEM, "out of memory");
		}
		s.root = s.owned_root;
	}
	si = rlb_cfg_add_source(ld, &s);
	if (si < 0)
		return si;
	ld->origin = si;
	if (!eq)
		return rlb_cfg_fail_src(ld, si, "expected KEY=VALUE, e.g. parallel.micro_batch_tokens=4096");
	while (*assignment == ' ')
		assignment++;
	klen = (size_t)(eq - assignment);
	while (klen && assignment[klen - 1] == ' ')
		klen--;
	if (klen >= sizeof(key))
		return rlb_cfg_fail_src(ld, si, "unknown key (too long)");
	memcpy(key, assignment, klen);
	key[klen] = '\0';
	val = eq + 1;
	dot = strchr(key, '.');
	if (!dot) {
		if (!strcmp(key, "preset"))
			return rlb_cfg_fail_src(ld, si, "a full preset cannot be applied with --set (name it with 'preset:' in the config file)");
		sec = rlb_cfg_find_section(key);
		if (sec >= 0)
			return rlb_cfg_fail_src(ld, si, "'%s' is a section: set one of its keys, e.g. '%s.%s'",
						key, key, rlb_cfg_sections[sec].keys[rlb_cfg_sections[sec].nkeys > 1].name);
		sug = suggest_path(key, sugbuf, sizeof(sugbuf));
		return rlb_cfg_fail_src(ld, si, "unknown key '%s'%s%s%s", key,
					sug ? " (did you mean '" : "", sug ? sug : "", sug ? "'?)" : "");
	}
	*dot = '\0';
	name = dot + 1;
	sec = rlb_cfg_find_section(key);
	ki = sec >= 0 ? rlb_cfg_find_key(sec, name) : -1;
	*dot = '.';
	if (sec < 0 || (ki < 0 && !(rlb_cfg_sections[sec].preset_kind && !strcmp(name, "preset")))) {
		sug = suggest_path(key, sugbuf, sizeof(sugbuf));
		return rlb_cfg_fail_src(ld, si, "unknown key '%s'%s%s%s", key,
					sug ? " (did you mean '" : "", sug ? sug : "", sug ? "'?)" : "");
	}
	while (*val == ' ' || *val == '\t')
		val++;
	if (ki >= 0 && rlb_cfg_sections[sec].keys[ki].type == KT_STRING &&
	    *val != '"' && *val != '\'') {
		/*
		 * A string as written, unless quoted: a layer pattern starts
		 * with '*' or '-', which YAML would read as an alias or a list.
		 * Otherwise as a plain scalar: blanks around it dropped, and
		 * ~ or null the empty string.
		 */
		size_t len = strlen(val);

		while (len && (val[len - 1] == ' ' || val[len - 1] == '\t'))
			len--;
		memset(&v, 0, sizeof(v));
		v.type = YAML_SCALAR_NODE;
		v.s = val;
		v.len = len;
		v.null = plain_null(val, len);
		return set_value(ld, si, sec, ki, &v, NULL);
	}
	rc = rlb_cfg_parse_doc(ld, si, val, strlen(val), &doc);
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
			rc = rlb_cfg_fail_src(ld, si, "expected a preset name for '%s', got %s",
					      key, kind_text(&v));
		else if ((ki = earlier_set(ld, sec)) >= 0)
			rc = rlb_cfg_fail_src(ld, si, "the preset replaces the %s section, and with it the earlier --set '%s': give '%s' first",
					      rlb_cfg_sections[sec].name,
					      ld->srcs[ld->marks[sec][ki].src].name, key);
		else
			rc = apply_preset(ld, si, sec, v.s, v.len, NULL);
	} else {
		rc = set_value(ld, si, sec, ki, &v, NULL);
	}
	yaml_document_delete(&doc);
	return rc;
}

/*
 * -c NAME with no file NAME: the built-in full config NAME as the config
 * file, else the error "cannot open config" already set, with the
 * nearest built-in name when one is close.
 */
static int builtin_config(struct loader *ld, const char *name)
{
	const struct rlb_preset *p = builtin_preset("", name);
	const char *const *names = rlb_config_preset_names(NULL);
	const char *sug;
	size_t n = 0;

	if (p) {
		struct source s = { SRC_PRESET, p->path, p->text, strlen(p->text),
				    NULL, NULL, NULL, NULL };

		return rlb_cfg_add_source(ld, &s);
	}
	while (names[n])
		n++;
	if (!strcmp(name, "-") && ld->err) {
		/* '-' is no file name here: a pipe is read as /dev/stdin */
		size_t len = strlen(ld->err->msg);

		snprintf(ld->err->msg + len, sizeof(ld->err->msg) - len,
			 " (standard input is -c /dev/stdin)");
		return RLB_ENOTFOUND;
	}
	sug = strchr(name, '/') ? NULL : rlb_cfg_suggest(name, names, n);
	if (sug && ld->err) {
		size_t len = strlen(ld->err->msg);

		snprintf(ld->err->msg + len, sizeof(ld->err->msg) - len,
			 " (built-in config '%s'?)", sug);
	}
	return RLB_ENOTFOUND;
}

/* ------------------------------------------------------------------ */
/* Public interface.                                                   */

static int config_load_c(struct rlb_config *cfg, const char *path,
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
	rlb_cfg_loader_init(&ld, cfg, path, err);
	if (path) {
		si = rlb_cfg_read_source(&ld, path, "config", SRC_FILE, NULL);
		/* no such file: a built-in config of that name (config --presets) */
		if (si == RLB_ENOTFOUND) {
			si = builtin_config(&ld, path);
			if (si >= 0 && err)	/* not the file's error, then */
				memset(err, 0, sizeof(*err));
		}
		if (si < 0) {
			rc = si == RLB_ENOTFOUND ? RLB_EIO : si;
			if (err)
				err->code = rc;
			goto out;
		}
		ld.origin = si;
		rc = rlb_cfg_parse_doc(&ld, si, ld.srcs[si].text, ld.srcs[si].len, &doc);
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
	rc = rlb_cfg_validate(&ld);	/* before ep_size 0 is resolved */
	if (rc == 0 && !cfg->parallel.ep_size)
		cfg->parallel.ep_size = rlb_config_gpus(cfg);
out:
	rlb_cfg_loader_release(&ld);
	if (rc < 0) {
		rlb_config_defaults(cfg);
		if (path)
			memcpy(cfg->path, path, strlen(path) + 1);
	}
	return rc;
}

/* config_load_c in the C locale (clocale.h) */
int rlb_config_load(struct rlb_config *cfg, const char *path,
		    const char *const *sets, size_t nsets, struct rlb_err *err)
{
	locale_t before = rlb_clocale_begin();
	int ret = config_load_c(cfg, path, sets, nsets, err);

	rlb_clocale_end(before);
	return ret;
}

static int config_get_c(const struct rlb_config *cfg, const char *key, char *buf,
			size_t size, struct rlb_err *err)
{
	char sec_name[RLB_NAME_MAX], sugbuf[RLB_NAME_MAX + 16], num[40];
	const char *dot = strchr(key, '.'), *sug = NULL, *text;
	int sec = -1, ki = -1;
	size_t n;

	if (dot && (size_t)(dot - key) < sizeof(sec_name)) {
		memcpy(sec_name, key, (size_t)(dot - key));
		sec_name[dot - key] = '\0';
		sec = rlb_cfg_find_section(sec_name);
		if (sec >= 0)
			ki = rlb_cfg_find_key(sec, dot + 1);
	}
	if (ki < 0 && sec >= 0 && rlb_cfg_sections[sec].preset_kind &&
	    !strcmp(dot + 1, "preset"))
		return rlb_err_set(err, RLB_ENOTFOUND,
				   "'%s' has no value: a preset sets the section's keys when the configuration is loaded",
				   key);
	if (ki < 0) {
		if (strlen(key) < RLB_NAME_MAX * 2)
			sug = suggest_path(key, sugbuf, sizeof(sugbuf));
		return rlb_err_set(err, RLB_ENOTFOUND, "unknown key '%s'%s%s%s", key,
				   sug ? " (did you mean '" : "", sug ? sug : "",
				   sug ? "'?)" : "");
	}
	text = rlb_cfg_value_text(cfg, &rlb_cfg_sections[sec].keys[ki], num, sizeof(num));
	n = strlen(text);
	if (n >= size)
		return rlb_err_set(err, RLB_ERANGE,
				   "the value of '%s' takes %zu bytes, the buffer %zu",
				   key, n + 1, size);
	memcpy(buf, text, n + 1);
	return 0;
}

/* config_get_c in the C locale (clocale.h) */
int rlb_config_get(const struct rlb_config *cfg, const char *key, char *buf,
		   size_t size, struct rlb_err *err)
{
	locale_t before = rlb_clocale_begin();
	int ret = config_get_c(cfg, key, buf, size, err);

	rlb_clocale_end(before);
	return ret;
}

struct rlb_config *rlb_config_new(const char *path, const char *const *sets,
				  size_t nsets, struct rlb_err *err)
{
	struct rlb_config *cfg = malloc(sizeof(*cfg));

	if (!cfg) {
		rlb_err_set(err, RLB_ENOMEM, "out of memory");
		return NULL;
	}
	if (rlb_config_load(cfg, path, sets, nsets, err) != 0) {
		free(cfg);
		return NULL;
	}
	return cfg;
}

void rlb_config_free(struct rlb_config *cfg)
{
	free(cfg);
}

static int config_set_c(struct rlb_config *cfg, const char *assignment,
			struct rlb_err *err)
{
	struct rlb_config *work = malloc(sizeof(*work));
	struct loader ld;
	int rc;

	if (!work)
		return rlb_err_set(err, RLB_ENOMEM, "out of memory");
	/* a preset resets its section before its keys can fail: work on a copy */
	*work = *cfg;
	rlb_cfg_loader_init(&ld, work, cfg->path, err);
	rc = apply_set(&ld, assignment);
	rlb_cfg_loader_release(&ld);
	if (rc >= 0)
		*cfg = *work;
	free(work);
	return rc < 0 ? rc : 0;
}

/* config_set_c in the C locale (clocale.h) */
int rlb_config_set(struct rlb_config *cfg, const char *assignment,
		   struct rlb_err *err)
{
	locale_t before = rlb_clocale_begin();
	int ret = config_set_c(cfg, assignment, err);

	rlb_clocale_end(before);
	return ret;
}
