/*
 * config_source.c - the config loader's sources: the config file, presets
 * and --set assignments read so far, each parsed as exactly one YAML
 * document, and the errors that point into them (file:line:col and the
 * offending line with a caret) with did-you-mean suggestions.
 */
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <yaml.h>

#include "config.h"
#include "config_impl.h"
#include "sniff.h"

#define CONFIG_BYTES_MAX (1u << 20)	/* larger files are not configs */
#define LINE_SHOW_MAX 160		/* bytes of a source line shown */
#define SET_SHOW_MAX 256		/* bytes of a --set assignment shown */
#define NESTING_MAX 64			/* flow collections inside each other */

/* ------------------------------------------------------------------ */
/* The loader: sources read so far and where each key was last set.  */

void rlb_cfg_clear_marks(struct mark *m, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++) {
		m[i].src = m[i].origin = -1;
		m[i].line = m[i].col = 0;
	}
}

void rlb_cfg_loader_init(struct loader *ld, struct rlb_config *cfg,
			 const char *top_name, struct rlb_err *err)
{
	int s;

	memset(ld, 0, sizeof(*ld));
	ld->cfg = cfg;
	ld->err = err;
	ld->top_name = top_name && *top_name ? top_name : NULL;
	for (s = 0; s < NSECTIONS; s++)
		rlb_cfg_clear_marks(ld->marks[s], KEYS_MAX);
	rlb_cfg_clear_marks(ld->section_marks, NSECTIONS);
}

void rlb_cfg_loader_release(struct loader *ld)
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
int rlb_cfg_add_source(struct loader *ld, struct source *s)
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
const char *rlb_cfg_show(const char *s, size_t len, char *buf, size_t size)
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
int rlb_cfg_vfail(struct loader *ld, int si, int line, int col,
		  const char *fmt, va_list ap)
{
	char body[RLB_ERR_MSG_MAX], snip[2 * LINE_SHOW_MAX + 16];
	const struct source *s = si >= 0 ? &ld->srcs[si] : NULL;
	const char *name = s ? s->name : ld->top_name;

	vsnprintf(body, sizeof(body), fmt, ap);
	if (s && s->kind == SRC_SET) {
		/* a long one (a layer pattern) shortened, so that the reason fits */
		int n = strlen(name) > SET_SHOW_MAX ? SET_SHOW_MAX : (int)strlen(name);

		return rlb_err_set(ld->err, RLB_ECONFIG, "--set '%.*s%s': %s", n, name,
				   name[n] ? "..." : "", body);
	}
	if (!name)
		return rlb_err_set(ld->err, RLB_ECONFIG, "%s", body);
	if (!s || line < 1)
		return rlb_err_set(ld->err, RLB_ECONFIG, "%s: %s", name, body);
	snippet(s->text, s->len, line, col, snip, sizeof(snip));
	return rlb_err_set(ld->err, RLB_ECONFIG, "%s:%d:%d: %s%s", name, line,
			   col, body, snip);
}

__attribute__((format(printf, 3, 4)))
int rlb_cfg_fail_src(struct loader *ld, int si, const char *fmt, ...)
{
	va_list ap;
	int rc;

	va_start(ap, fmt);
	rc = rlb_cfg_vfail(ld, si, 0, 0, fmt, ap);
	va_end(ap);
	return rc;
}

__attribute__((format(printf, 5, 6)))
int rlb_cfg_fail_at(struct loader *ld, int si, int line, int col,
		    const char *fmt, ...)
{
	va_list ap;
	int rc;

	va_start(ap, fmt);
	rc = rlb_cfg_vfail(ld, si, line, col, fmt, ap);
	va_end(ap);
	return rc;
}

__attribute__((format(printf, 4, 5)))
int rlb_cfg_fail_mark(struct loader *ld, int si, const yaml_mark_t *m,
		      const char *fmt, ...)
{
	va_list ap;
	int rc;

	va_start(ap, fmt);
	rc = rlb_cfg_vfail(ld, si, m ? (int)m->line + 1 : 0, m ? (int)m->column + 1 : 0,
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
const char *rlb_cfg_suggest(const char *word, const char *const *cands, size_t n)
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
/* Files and documents.                                                */

/* The directory part of PATH ("." when none), allocated; NULL when out of memory. */
char *rlb_cfg_dir_of(const char *path)
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
int rlb_cfg_read_source(struct loader *ld, const char *path, const char *what,
			enum src_kind kind, const char *root)
{
	struct source s = { kind, NULL, NULL, 0, NULL, NULL, NULL, NULL };
	FILE *fp = fopen(path, "rb");
	size_t cap = 4096, n = 0, got;
	char *buf = NULL, *nb;
	enum rlb_kind k;
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
	/* a file of another kind is named as such, not by its first bad byte */
	k = rlb_sniff((const uint8_t *)buf, n);
	if (k != RLB_KIND_UTF16) {	/* libyaml reads UTF-16 */
		rc = rlb_kind_err(ld->err, RLB_ECONFIG, k, RLB_KIND_YAML_CONFIG, path,
				  strcmp(what, "config") ? "a YAML preset" : "a YAML config",
				  k == RLB_KIND_HF_CONFIG ?
				  ": 'relibra config --from-hf FILE' makes a config from it" : NULL);
		if (rc) {
			free(buf);
			return rc;
		}
	}
	s.owned_text = buf;
	s.owned_name = strdup(path);
	s.owned_root = root ? strdup(root) : rlb_cfg_dir_of(path);
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
	return rlb_cfg_add_source(ld, &s);

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
		return rlb_cfg_fail_mark(ld, si, s->text ? &m : NULL,
					 "syntax error: %s at byte offset %zu",
					 p->problem ? p->problem : "unreadable input",
					 p->problem_offset);
	}
	if (p->context)
		return rlb_cfg_fail_mark(ld, si, s->text ? &p->problem_mark : NULL,
					 "syntax error: %s (%s at line %zu)%s",
					 p->problem ? p->problem : "invalid YAML",
					 p->context, p->context_mark.line + 1,
					 /* a layer pattern such as *E*E, unquoted */
					 strstr(p->context, "alias") ?
					 "; a value that starts with '*', such as a layer pattern, "
					 "needs quotes" : "");
	return rlb_cfg_fail_mark(ld, si, s->text ? &p->problem_mark : NULL,
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
				return rlb_cfg_fail_mark(ld, si, ld->srcs[si].text ? &m : NULL,
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
int rlb_cfg_parse_doc(struct loader *ld, int si, const char *text, size_t len,
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
		rc = rlb_cfg_fail_mark(ld, si, ld->srcs[si].text ? &root->start_mark : NULL,
				       "a second YAML document (a config holds one)");
		yaml_document_delete(doc);
	}
	yaml_document_delete(&extra);
out:
	yaml_parser_delete(&parser);
	return rc;
}
