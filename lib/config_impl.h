/*
 * config_impl.h - what lib/config*.c share: the sections and their tables
 * of keys (config_keys.c), the loader's state, sources and messages
 * (config_source.c) and validation (config_check.c).  Private to
 * lib/config*.c; not installed.
 */
#ifndef RLB_CONFIG_IMPL_H
#define RLB_CONFIG_IMPL_H

#include <stdarg.h>
#include <stddef.h>

#include <yaml.h>

#include "config.h"

#define PRESET_DEPTH_MAX 16
#define KEYS_MAX 48			/* rows per section */
#define SHOW_MAX 48			/* bytes of a value quoted in messages */

/* ------------------------------------------------------------------ */
/* Sections and keys (config_keys.c).                                  */

enum key_type {
	KT_INT,		/* int */
	KT_DOUBLE,	/* double, finite */
	KT_BOOL,	/* int 0/1: true/false, yes/no, on/off */
	KT_STRING,	/* char[max + 1] */
	KT_ENUM,	/* int: values[i] for choices[i] */
	KT_CHOICE,	/* char[RLB_NAME_MAX] holding one of choices */
};

#define KF_REQUIRED 1u	/* 0 means "not given": an error */
#define KF_AUTO 2u	/* KT_BOOL that also takes "auto" (RLB_CFG_AUTO) */

/*
 * One configuration key: its name inside the section, type, place in
 * struct rlb_config and allowed range (for strings, max is the length
 * bound).  Rows are written with the K* macros in config_keys.c.
 */
struct key {
	const char *name;
	enum key_type type;
	size_t offset;
	double min, max;
	unsigned flags;
	const char *const *choices;	/* KT_ENUM, KT_CHOICE; NULL-terminated */
	const int *values;		/* KT_ENUM: the value of each choice */
};

struct section {
	const char *name;
	const struct key *keys;
	size_t nkeys;
	const char *preset_kind;	/* "models", "clusters" or NULL */
	size_t offset, size;		/* of the section's struct */
};

enum { SEC_MODEL, SEC_CLUSTER, SEC_PARALLEL, SEC_BALANCER, SEC_WORKLOAD, NSECTIONS };

extern const struct section rlb_cfg_sections[NSECTIONS];

/* Index of a section, or of a key in section SEC; -1 when there is none. */
int rlb_cfg_find_section(const char *name);
int rlb_cfg_find_key(int sec, const char *name);
/* Key names of a section (plus "preset" where it takes one). */
size_t rlb_cfg_section_cands(int sec, const char **cands);
/* Index of S in the NULL-terminated CHOICES, or -1. */
int rlb_cfg_choice_index(const char *const *choices, const char *s);
/* Index in K's choices of the KT_ENUM value V, or -1. */
int rlb_cfg_enum_index(const struct key *k, int v);
/* Key K's field in CFG. */
void *rlb_cfg_field(struct rlb_config *cfg, const struct key *k);
const void *rlb_cfg_cfield(const struct rlb_config *cfg, const struct key *k);
/* "an integer", "a number", ...; for choices "one of a, b" written in BUF. */
const char *rlb_cfg_type_text(const struct key *k, char *buf, size_t size);
/* The shortest %g text (15 to 17 digits) that reads back as V. */
void rlb_cfg_fmt_double(double v, char *buf, size_t size);
/*
 * The text of key k's value in cfg: numbers as `relibra config` prints
 * them (into num), true/false, strings and names as they are.
 */
const char *rlb_cfg_value_text(const struct rlb_config *cfg, const struct key *k,
			       char *num, size_t size);
/* K's range as "[min, max]", "(min, max]" or "(at least min)", in BUF. */
const char *rlb_cfg_range_text(const struct key *k, char *buf, size_t size);
int rlb_cfg_in_range(const struct key *k, double v);

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

void rlb_cfg_clear_marks(struct mark *m, size_t n);
void rlb_cfg_loader_init(struct loader *ld, struct rlb_config *cfg,
			 const char *top_name, struct rlb_err *err);
void rlb_cfg_loader_release(struct loader *ld);
/* Append a source; takes ownership of the owned_* pointers in *s. */
int rlb_cfg_add_source(struct loader *ld, struct source *s);
/* The directory part of PATH ("." when none), allocated; NULL when out of memory. */
char *rlb_cfg_dir_of(const char *path);
/* Read PATH into a new source; ENOENT is reported as RLB_ENOTFOUND. */
int rlb_cfg_read_source(struct loader *ld, const char *path, const char *what,
			enum src_kind kind, const char *root);
/* Parse TEXT (source SI's, or a --set value) as exactly one YAML document. */
int rlb_cfg_parse_doc(struct loader *ld, int si, const char *text, size_t len,
		      yaml_document_t *doc);

/*
 * Record a configuration error (RLB_ECONFIG) in source SI (-1: the config
 * file, if any) at LINE:COL or mark M, 1-based, 0 or NULL for none.
 */
int rlb_cfg_vfail(struct loader *ld, int si, int line, int col,
		  const char *fmt, va_list ap);
__attribute__((format(printf, 3, 4)))
int rlb_cfg_fail_src(struct loader *ld, int si, const char *fmt, ...);
__attribute__((format(printf, 5, 6)))
int rlb_cfg_fail_at(struct loader *ld, int si, int line, int col,
		    const char *fmt, ...);
__attribute__((format(printf, 4, 5)))
int rlb_cfg_fail_mark(struct loader *ld, int si, const yaml_mark_t *m,
		      const char *fmt, ...);
/* Copy up to SHOW_MAX bytes of s for quoting, control bytes as '?'. */
const char *rlb_cfg_show(const char *s, size_t len, char *buf, size_t size);
/* The closest candidate: edit distance <= 2, else a prefix match; or NULL. */
const char *rlb_cfg_suggest(const char *word, const char *const *cands, size_t n);

/* ------------------------------------------------------------------ */
/* Validation (config_check.c).                                        */

/* Required keys, every key's range, the rules between keys. */
int rlb_cfg_validate(struct loader *ld);

/* 1 when S (LEN bytes) can name a preset: letters, digits, '-', '_', '.', not first. */
int rlb_cfg_preset_name_ok(const char *s, size_t len);

#endif
