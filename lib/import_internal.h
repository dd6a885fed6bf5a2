/*
 * import_internal.h - shared machinery of the importers (lib/import*.c):
 * the importer state that assigns step / group / sample ids and hands
 * assembled sequences to a sink (the trace writer, or a test's
 * collector), base64, dense-layer dropping, and the .npy header parser.
 * Not installed API: the public entry points are in capture.h.
 */
#ifndef RLB_IMPORT_INTERNAL_H
#define RLB_IMPORT_INTERNAL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <jansson.h>

#include "capture.h"

/*
 * Where finished sequences go.  Returns 0 or a negative RLB_E* code with
 * err filled.  seq's arrays are only valid during the call.
 */
typedef int (*rlb_import_sink_fn)(void *ctx, const struct rlb_seq *seq,
				  struct rlb_err *err);

struct rlb_importer {
	const struct rlb_import_opts *opts;
	const struct rlb_config *cfg;
	const char *name;		/* input name used in messages */
	rlb_import_sink_fn sink;
	void *sink_ctx;
	rlb_progress_fn progress;
	void *progress_ctx;
	int gates;			/* keep gate weights */
	uint32_t experts, topk, moe_layers;
	/* hidden layers (dense + MoE), the first MoE layer's index among them, the period */
	uint32_t hidden_layers, first_moe, period;
	/* with a layer pattern: each MoE layer's index among the hidden layers */
	const char *pattern;		/* the config's model.layer_pattern, NULL without */
	uint16_t moe_at[RLB_TRACE_MAX_LAYERS];

	/* step / group / sample assignment */
	int have_step;
	uint32_t step;			/* step of the last sequence emitted */
	uint64_t ordinal;		/* sequences emitted in this step */
	int have_prev;
	uint32_t prev_group, prev_sample;
	int have_seen_step;
	uint32_t seen_step;		/* highest step read so far (ordering check) */

	/* counts */
	uint64_t records;
	uint64_t sequences;
	uint64_t tokens;
	uint64_t recomputed;		/* megatron: records dropped as recompute */
	uint64_t unfinished;		/* sglang: streamed requests without their last chunk */

	/* scratch for layer-major sequences */
	uint16_t *ids;
	size_t ids_cap;
	float *gate_buf;
	size_t gate_cap;
};

/* Source of one sequence's ids before assignment: -1 where absent. */
struct rlb_import_ids {
	int64_t step;
	int64_t group;
	int64_t sample;
};

int rlb_importer_init(struct rlb_importer *im, const struct rlb_import_opts *opts,
		      const struct rlb_config *cfg, const char *name,
		      rlb_import_sink_fn sink, void *sink_ctx,
		      rlb_progress_fn progress, void *progress_ctx,
		      struct rlb_err *err);
void rlb_importer_release(struct rlb_importer *im);

/*
 * Import PATH into a sink instead of a writer: what rlb_import does, for
 * tests and for callers that consume sequences themselves.
 */
int rlb_import_to_sink(const struct rlb_import_opts *opts, const char *path,
		       const struct rlb_config *cfg, rlb_import_sink_fn sink,
		       void *sink_ctx, rlb_progress_fn progress,
		       void *progress_ctx, struct rlb_err *err);

/* The formats, reading an opened stream / a path (lib/import_*.c). */
int rlb_import_sglang(struct rlb_importer *im, FILE *fp, struct rlb_err *err);
int rlb_import_jsonl(struct rlb_importer *im, FILE *fp, struct rlb_err *err);
int rlb_import_megatron(struct rlb_importer *im, FILE **fps, const char **names,
			size_t nfiles, struct rlb_err *err);
int rlb_import_vllm(struct rlb_importer *im, const char *path,
		    struct rlb_err *err);

/*
 * The step a record resolves to (option, else the record's, else 0), with
 * the ordering check: steps must not decrease.  Call once per record
 * before emitting anything for it.
 */
int rlb_importer_step(struct rlb_importer *im, int64_t in_step, uint32_t *step,
		      struct rlb_err *err);

/*
 * Emit one sequence whose ids (and gates when im->gates) are layer-major,
 * MoE layers only: assigns group and sample (rules: docs/jsonl-format.md),
 * passes it to the sink, counts it.  Sequences of zero
 * tokens are skipped.
 */
int rlb_importer_emit(struct rlb_importer *im, uint32_t step,
		      const struct rlb_import_ids *in, uint32_t tokens,
		      const uint16_t *ids, const float *gates,
		      struct rlb_err *err);

/* Same with token-major input [tokens][moe_layers][topk]. */
int rlb_importer_emit_token_major(struct rlb_importer *im, uint32_t step,
				  const struct rlb_import_ids *in,
				  uint32_t tokens, const uint16_t *ids,
				  const float *gates, struct rlb_err *err);

/*
 * Where an input with `layers` layers per token holds its MoE layers:
 * MoE layer j is input layer rlb_layer_map_at(map, j), first + j *
 * stride, or at[j] for a layer pattern.  An input of every hidden layer
 * has the dense ones too (the model's layout, rlb_model_moe_layer_index);
 * one of moe_layers layers has first 0 and stride 1.  Any other count is
 * RLB_EMISMATCH naming both.
 */
struct rlb_layer_map {
	uint32_t first, stride;
	const uint16_t *at;	/* NULL: first and stride */
};

static inline uint64_t rlb_layer_map_at(const struct rlb_layer_map *map, uint64_t j)
{
	return map->at ? map->at[j] : map->first + j * map->stride;
}

int rlb_importer_layer_map(const struct rlb_importer *im, uint64_t layers,
			   struct rlb_layer_map *map, struct rlb_err *err);

/* Little-endian integer element types of raw routing arrays. */
enum rlb_import_dtype {
	RLB_DT_I8,
	RLB_DT_U8,
	RLB_DT_I16,
	RLB_DT_U16,
	RLB_DT_I32,
	RLB_DT_U32,
	RLB_DT_I64,
};

size_t rlb_import_dtype_bytes(enum rlb_import_dtype dt);

/* A raw token-major array [rows][layers][topk] of little-endian ints. */
struct rlb_import_raw {
	const uint8_t *data;
	enum rlb_import_dtype dtype;
	uint64_t rows, layers, topk;
	const uint8_t *gates;		/* float32 LE of the same shape, or NULL */
	int64_t byte_base;		/* file offset of data[0] for messages, -1: none */
};

/*
 * Check and convert a raw array to token-major MoE-only ids
 * ([rows][moe_layers][topk]) and, when gates_out is not NULL, gates.
 * raw->topk must equal the config's topk and raw->layers one of the two
 * accepted layer counts.  Dense layers' values are not looked at.  An
 * MoE value outside [0, experts) is RLB_ERANGE naming row, layer and
 * column (and the byte when raw->byte_base >= 0).
 */
int rlb_import_convert(const struct rlb_importer *im,
		       const struct rlb_import_raw *raw, uint16_t *ids_out,
		       float *gates_out, struct rlb_err *err);

/*
 * Strict base64 (RFC 4648, standard alphabet, padded): decode LEN bytes
 * of S into a malloc'd *OUT of *OUT_LEN bytes.  Errors (RLB_EPARSE) name
 * the byte position in S: bad character, length not a multiple of 4,
 * misplaced padding, non-zero padding bits.
 */
int rlb_base64_decode(const char *s, size_t len, uint8_t **out,
		      size_t *out_len, struct rlb_err *err);

/* The parsed header of a .npy file. */
#define RLB_NPY_MAX_DIMS 8
struct rlb_npy_header {
	unsigned version_major, version_minor;
	enum rlb_import_dtype dtype;
	char descr[16];
	int fortran_order;
	unsigned ndim;
	uint64_t shape[RLB_NPY_MAX_DIMS];
	uint64_t data_offset;		/* bytes before the array data */
};

/*
 * Parse a .npy header from the first LEN bytes of a file.  RLB_ETRUNC
 * when LEN is too short (*need, when not NULL, gets the bytes needed);
 * RLB_EPARSE / RLB_EUNSUPPORTED with the byte offset otherwise.
 */
int rlb_npy_parse_header(const uint8_t *buf, size_t len,
			 struct rlb_npy_header *h, size_t *need,
			 struct rlb_err *err);

/*
 * The files in directory PATH whose names end in SUFFIX (names starting
 * with '.' skipped), as malloc'd "PATH/NAME" strings in natural order
 * (digit runs compared as numbers: step2 before step10).  Such an entry
 * that is not a regular file (a dangling link, a directory) is an error.
 * Free with rlb_import_free_list.
 */
int rlb_import_list_dir(const char *path, const char *suffix, char ***out,
			size_t *n, struct rlb_err *err);
void rlb_import_free_list(char **list, size_t n);

/*
 * " (a relibra trace: ...)", " (gzip-compressed: ...)": what an input of
 * another kind that starts with buf[0..len) is, for an importer's error;
 * "" when rlb_sniff cannot tell.
 */
const char *rlb_import_kind_advice(const uint8_t *buf, size_t len);

/* Natural order of two strings: digit runs compare by value. */
int rlb_natural_cmp(const char *a, const char *b);

/* Line reading shared by the JSON-lines formats. */
struct rlb_line_reader {
	FILE *fp;
	const char *name;
	char *line;
	size_t cap;
	size_t len;
	uint64_t lineno;
	uint64_t offset;		/* file offset of the current line */
	uint64_t next_offset;
};

/*
 * Next non-empty line (trailing whitespace removed): 1, 0 at the end,
 * RLB_EIO, or RLB_EPARSE for a line that holds a NUL byte.  The line is
 * in r->line (NUL-terminated, r->len bytes).
 */
int rlb_line_next(struct rlb_line_reader *r, struct rlb_err *err);
void rlb_line_release(struct rlb_line_reader *r);

/*
 * Parse r's current line as JSON.  RLB_EPARSE "NAME:LINE:COL: invalid
 * JSON: ..." on failure.
 */
int rlb_line_json(struct rlb_line_reader *r, json_t **out, struct rlb_err *err);

/*
 * Optional non-negative integer field: -1 when absent or null, else the
 * value (RLB_EPARSE when it is not an integer in [0, max]).
 */
int rlb_json_opt_uint(json_t *obj, const char *key, const char *field,
		      int64_t max, int64_t *out, struct rlb_err *err);

#endif
