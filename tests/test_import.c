/*
 * test_import.c - unit tests of lib/import*: base64, the .npy header,
 * each importer on inputs written here from known ids (dense layers,
 * dtypes, incremental chunks, assembly across layers), the id assignment
 * rules, exact error messages, and a round trip through the trace writer.
 */
#define _GNU_SOURCE
#include <float.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "import_internal.h"
#include "relibra.h"
#include "suites.h"

/* ---- helpers ----------------------------------------------------------- */

#define E 16
#define K 2
#define L 4

/* A sequence as the sink saw it (arrays copied). */
struct got_seq {
	struct rlb_seq s;
	uint16_t *ids;
	float *gates;
};

struct collector {
	struct got_seq *v;
	size_t n;
	int fail_at;		/* 1-based sequence to refuse, 0: none */
};

static int collect(void *ctx, const struct rlb_seq *seq, struct rlb_err *err)
{
	struct collector *c = ctx;
	size_t n = (size_t)seq->tokens * L * K;
	struct got_seq *g;

	if (c->fail_at && (size_t)c->fail_at == c->n + 1)
		return rlb_err_set(err, RLB_EIO, "sink refused");
	c->v = realloc(c->v, (c->n + 1) * sizeof(*c->v));
	ck_assert_ptr_nonnull(c->v);
	g = &c->v[c->n++];
	g->s = *seq;
	g->ids = malloc(n * sizeof(*g->ids));
	memcpy(g->ids, seq->ids, n * sizeof(*g->ids));
	g->gates = NULL;
	if (seq->gates) {
		g->gates = malloc(n * sizeof(*g->gates));
		memcpy(g->gates, seq->gates, n * sizeof(*g->gates));
	}
	return 0;
}

static void collector_free(struct collector *c)
{
	size_t i;

	for (i = 0; i < c->n; i++) {
		free(c->v[i].ids);
		free(c->v[i].gates);
	}
	free(c->v);
	memset(c, 0, sizeof(*c));
}

/*
 * The fixtures' layer layout after their `dense` leading layers: blocks
 * of `period` layers whose layer `offset` is MoE (1 and 0: MoE only).
 * Set by test_interleaved_layers, which puts them back.
 */
static unsigned period = 1, offset = 0;

static void tiny_config(struct rlb_config *cfg, int dense)
{
	rlb_config_defaults(cfg);
	cfg->model.experts = E;
	cfg->model.topk = K;
	cfg->model.moe_layers = L;
	cfg->model.first_dense_layers = dense;
	cfg->model.moe_layer_period = (int)period;
	cfg->model.moe_layer_offset = (int)offset;
	if (dense || period > 1)
		cfg->model.dense_ffn = 64;
}

/* Input layers of a fixture with `dense` leading layers. */
static unsigned in_layers(unsigned dense)
{
	return dense + L * period;
}

/* The MoE layer at input layer l, or -1 for a dense layer. */
static int moe_at(unsigned dense, unsigned l)
{
	if (l < dense || (l - dense) % period != offset)
		return -1;
	return (int)((l - dense) / period);
}

static struct rlb_import_opts opts_of(enum rlb_import_format f)
{
	struct rlb_import_opts o;

	memset(&o, 0, sizeof(o));
	o.format = f;
	o.step = -1;
	o.group = -1;
	return o;
}

/* The id the fixtures put at (token t, MoE layer l, column k) of sequence s. */
static uint16_t id_at(unsigned s, unsigned t, unsigned l, unsigned k)
{
	return (uint16_t)((s * 5 + t * 7 + l * 3 + k * 11) % E);
}

static float gate_at(unsigned s, unsigned t, unsigned l, unsigned k)
{
	return (float)(s + 1) * 0.5f + (float)t * 0.25f + (float)l * 0.125f + (float)k;
}

/* Check sequence g holds the fixture ids of sequence s (layer-major). */
static void check_ids(const struct got_seq *g, unsigned s, unsigned tokens)
{
	unsigned t, l, k;

	ck_assert_uint_eq(g->s.tokens, tokens);
	for (l = 0; l < L; l++)
		for (t = 0; t < tokens; t++)
			for (k = 0; k < K; k++)
				ck_assert_msg(g->ids[((size_t)l * tokens + t) * K + k] ==
					      id_at(s, t, l, k),
					      "seq %u t %u l %u k %u: got %u want %u", s, t, l, k,
					      g->ids[((size_t)l * tokens + t) * K + k],
					      id_at(s, t, l, k));
}

static char *tmp_dir(void)
{
	char tmpl[512];
	char *d;

	snprintf(tmpl, sizeof(tmpl), "%s/import-XXXXXX", rlb_test_tmpdir());
	d = mkdtemp(tmpl);
	ck_assert_ptr_nonnull(d);
	return strdup(d);
}

static char *path_in(const char *dir, const char *name)
{
	char *p;

	ck_assert_int_ge(asprintf(&p, "%s/%s", dir, name), 0);
	return p;
}

static void write_file(const char *path, const void *data, size_t n)
{
	FILE *fp = fopen(path, "wb");

	ck_assert_ptr_nonnull(fp);
	ck_assert_uint_eq(fwrite(data, 1, n, fp), n);
	ck_assert_int_eq(fclose(fp), 0);
}

static char *b64(const uint8_t *p, size_t n)
{
	static const char tab[] =
		"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
	char *s = malloc(n / 3 * 4 + 8), *o = s;
	size_t i;

	for (i = 0; i + 2 < n; i += 3) {
		uint32_t v = (uint32_t)p[i] << 16 | (uint32_t)p[i + 1] << 8 | p[i + 2];

		*o++ = tab[v >> 18];
		*o++ = tab[(v >> 12) & 63];
		*o++ = tab[(v >> 6) & 63];
		*o++ = tab[v & 63];
	}
	if (n - i == 1) {
		uint32_t v = (uint32_t)p[i] << 16;

		*o++ = tab[v >> 18];
		*o++ = tab[(v >> 12) & 63];
		*o++ = '=';
		*o++ = '=';
	} else if (n - i == 2) {
		uint32_t v = (uint32_t)p[i] << 16 | (uint32_t)p[i + 1] << 8;

		*o++ = tab[v >> 18];
		*o++ = tab[(v >> 12) & 63];
		*o++ = tab[(v >> 6) & 63];
		*o++ = '=';
	}
	*o = '\0';
	return s;
}

/*
 * The flat [rows][layers][topk] array of sequence s in element size esz,
 * rows from row0; `dense` leading layers filled with dense_val.
 */
static uint8_t *routing_bytes(unsigned s, unsigned row0, unsigned rows,
			      unsigned dense, int64_t dense_val, size_t esz,
			      size_t *n)
{
	unsigned layers = in_layers(dense), t, l, k;
	uint8_t *buf;
	size_t i = 0;

	*n = (size_t)rows * layers * K * esz;
	buf = malloc(*n + 1);
	for (t = row0; t < row0 + rows; t++) {
		for (l = 0; l < layers; l++) {
			for (k = 0; k < K; k++, i++) {
				int m = moe_at(dense, l);
				int64_t v = m < 0 ? dense_val : id_at(s, t, (unsigned)m, k);

				if (esz == 1)
					buf[i] = (uint8_t)v;
				else if (esz == 2)
					rlb_put_u16(buf + 2 * i, (uint16_t)v);
				else if (esz == 4)
					rlb_put_u32(buf + 4 * i, (uint32_t)v);
				else
					rlb_put_u64(buf + 8 * i, (uint64_t)v);
			}
		}
	}
	return buf;
}

static uint8_t *gate_bytes(unsigned s, unsigned rows, unsigned dense, size_t *n)
{
	unsigned layers = in_layers(dense), t, l, k;
	uint8_t *buf;
	size_t i = 0;

	*n = (size_t)rows * layers * K * 4;
	buf = malloc(*n + 1);
	for (t = 0; t < rows; t++)
		for (l = 0; l < layers; l++)
			for (k = 0; k < K; k++, i++)
				rlb_put_f32(buf + 4 * i, moe_at(dense, l) < 0 ? 0.0f :
					    gate_at(s, t, (unsigned)moe_at(dense, l), k));
	return buf;
}

/* An SGLang response line with id "rS" holding BYTES (freed). */
static char *sg_line_bytes(unsigned s, uint8_t *bytes, size_t n, const char *dtype,
			   const char *top, const char *meta)
{
	char *enc = b64(bytes, n), *line, dt[64] = "";

	if (dtype)
		snprintf(dt, sizeof(dt), ", \"routed_experts_dtype\": \"%s\"", dtype);
	ck_assert_int_ge(asprintf(&line,
				  "{%s\"text\": \"x\", \"meta_info\": {\"id\": \"r%u\", "
				  "\"routed_experts\": \"%s\"%s%s}}\n",
				  top ? top : "", s, enc, dt, meta ? meta : ""), 0);
	free(bytes);
	free(enc);
	return line;
}

/* An SGLang response line for sequence s: top-level TOP, meta_info extra META. */
static char *sg_line(unsigned s, unsigned row0, unsigned rows, unsigned dense,
		     int64_t dense_val, const char *dtype, const char *top,
		     const char *meta)
{
	size_t esz = !dtype || !strcmp(dtype, "int32") ? 4 : !strcmp(dtype, "uint16") ? 2 : 1;
	size_t n;
	uint8_t *bytes = routing_bytes(s, row0, rows, dense, dense_val, esz, &n);

	return sg_line_bytes(s, bytes, n, dtype, top, meta);
}

/* Run an import of TEXT (written to a file) into c; returns the status. */
/* import_text of LEN bytes, which may hold NULs. */
static int import_bytes(const char *text, size_t len,
			const struct rlb_import_opts *o,
			const struct rlb_config *cfg, struct collector *c,
			struct rlb_err *err, const char *fname)
{
	char *dir = tmp_dir(), *p = path_in(dir, fname);
	int ret;

	write_file(p, text, len);
	ret = rlb_import_to_sink(o, p, cfg, collect, c, NULL, NULL, err);
	/* Messages name the file as given; tests compare the part after it. */
	if (ret != 0 && err && strncmp(err->msg, p, strlen(p)) == 0) {
		memmove(err->msg, err->msg + strlen(dir) + 1,
			strlen(err->msg + strlen(dir) + 1) + 1);
	}
	unlink(p);
	rmdir(dir);
	free(p);
	free(dir);
	return ret;
}

static int import_text(const char *text, const struct rlb_import_opts *o,
		       const struct rlb_config *cfg, struct collector *c,
		       struct rlb_err *err, const char *fname)
{
	return import_bytes(text, strlen(text), o, cfg, c, err, fname);
}

static char *cat(char *a, char *b)
{
	char *r;

	ck_assert_int_ge(asprintf(&r, "%s%s", a ? a : "", b), 0);
	free(a);
	free(b);
	return r;
}

/* ---- format names, base64 ------------------------------------------------ */

START_TEST(test_format_names)
{
	struct rlb_err err = { 0, "" };
	enum rlb_import_format f;

	ck_assert_int_eq(rlb_import_format_from_name("sglang", &f, &err), 0);
	ck_assert_int_eq(f, RLB_IMPORT_SGLANG);
	ck_assert_int_eq(rlb_import_format_from_name("vllm", &f, &err), 0);
	ck_assert_int_eq(f, RLB_IMPORT_VLLM);
	ck_assert_int_eq(rlb_import_format_from_name("megatron", &f, &err), 0);
	ck_assert_int_eq(f, RLB_IMPORT_MEGATRON);
	ck_assert_int_eq(rlb_import_format_from_name("jsonl", &f, &err), 0);
	ck_assert_int_eq(f, RLB_IMPORT_JSONL);
	ck_assert_int_eq(rlb_import_format_from_name("SGLang", &f, &err), RLB_EINVAL);
	ck_assert_str_eq(err.msg,
			 "unknown format 'SGLang' (expected sglang, vllm, megatron or jsonl)");
}
END_TEST

START_TEST(test_base64_good)
{
	static const struct { const char *in, *out; } v[] = {
		{ "", "" }, { "Zg==", "f" }, { "Zm8=", "fo" }, { "Zm9v", "foo" },
		{ "Zm9vYg==", "foob" }, { "Zm9vYmE=", "fooba" }, { "Zm9vYmFy", "foobar" },
	};
	struct rlb_err err = { 0, "" };
	uint8_t all[256], *out;
	size_t i, n;
	char *enc;

	for (i = 0; i < sizeof(v) / sizeof(v[0]); i++) {
		ck_assert_int_eq(rlb_base64_decode(v[i].in, strlen(v[i].in), &out, &n, &err), 0);
		ck_assert_uint_eq(n, strlen(v[i].out));
		ck_assert(memcmp(out, v[i].out, n) == 0);
		free(out);
	}
	for (i = 0; i < 256; i++)
		all[i] = (uint8_t)(255 - i);
	for (n = 0; n <= 256; n += 85) {
		size_t m;

		enc = b64(all, n);
		ck_assert_int_eq(rlb_base64_decode(enc, strlen(enc), &out, &m, &err), 0);
		ck_assert_uint_eq(m, n);
		ck_assert(memcmp(out, all, n) == 0);
		free(out);
		free(enc);
	}
}
END_TEST

START_TEST(test_base64_bad)
{
	static const struct { const char *in, *msg; } v[] = {
		{ "Zm9v!A==", "invalid base64 character '!' at byte 4" },
		{ "Zm9v\001A==", "invalid base64 character 0x01 at byte 4" },
		{ "Zm9v\nZm9v", "invalid base64 character 0x0a at byte 4" },
		{ "Zm-v", "invalid base64 character '-' at byte 2" },
		{ "Zm9", "base64 length 3 is not a multiple of 4" },
		{ "Zm9vZ", "base64 length 5 is not a multiple of 4" },
		{ "Zg", "base64 length 2 is not a multiple of 4" },
		{ "Zg==Zg==", "misplaced base64 padding at byte 2" },
		{ "Z=9v", "misplaced base64 padding at byte 1" },
		{ "Zm=v", "misplaced base64 padding at byte 2" },
		{ "Z===", "misplaced base64 padding at byte 1" },
		{ "====", "misplaced base64 padding at byte 0" },
		{ "Zh==", "non-zero bits before base64 padding at byte 1" },
		{ "Zm9=", "non-zero bits before base64 padding at byte 2" },
	};
	struct rlb_err err = { 0, "" };
	uint8_t *out;
	size_t i, n;

	for (i = 0; i < sizeof(v) / sizeof(v[0]); i++) {
		out = (uint8_t *)&n;
		ck_assert_int_eq(rlb_base64_decode(v[i].in, strlen(v[i].in), &out, &n, &err),
				 RLB_EPARSE);
		ck_assert_str_eq(err.msg, v[i].msg);
		ck_assert_ptr_null(out);
	}
}
END_TEST

/* ---- .npy ---------------------------------------------------------------- */

/* A .npy file: preamble, dictionary DICT padded to 64 bytes, then DATA. */
static uint8_t *npy_build(unsigned major, const char *dict, const void *data,
			  size_t ndata, size_t *n)
{
	size_t pre = major == 1 ? 10 : 12, dl = strlen(dict), hlen;
	uint8_t *buf;

	hlen = (pre + dl + 1 + 63) / 64 * 64 - pre;
	*n = pre + hlen + ndata;
	buf = malloc(*n + 1);
	memcpy(buf, "\x93NUMPY", 6);
	buf[6] = (uint8_t)major;
	buf[7] = 0;
	if (major == 1)
		rlb_put_u16(buf + 8, (uint16_t)hlen);
	else
		rlb_put_u32(buf + 8, (uint32_t)hlen);
	memset(buf + pre, ' ', hlen);
	memcpy(buf + pre, dict, dl);
	buf[pre + hlen - 1] = '\n';
	if (ndata)
		memcpy(buf + pre + hlen, data, ndata);
	return buf;
}

static uint8_t *npy_seq(unsigned major, const char *descr, unsigned s, unsigned rows,
			unsigned dense, int64_t dense_val, size_t *n)
{
	size_t esz = descr[2] - '0', nd;
	uint8_t *data = routing_bytes(s, 0, rows, dense, dense_val, esz, &nd), *buf;
	char dict[200];

	snprintf(dict, sizeof(dict),
		 "{'descr': '%s', 'fortran_order': False, 'shape': (%u, %u, %u), }",
		 descr, rows, in_layers(dense), K);
	buf = npy_build(major, dict, data, nd, n);
	free(data);
	return buf;
}

START_TEST(test_npy_header_good)
{
	struct rlb_err err = { 0, "" };
	struct rlb_npy_header h;
	uint8_t *buf;
	size_t n, need;
	unsigned v;

	for (v = 1; v <= 3; v++) {
		buf = npy_build(v, "{'descr': '<i4', 'fortran_order': False, 'shape': (5, 4, 2), }",
				NULL, 0, &n);
		ck_assert_int_eq(rlb_npy_parse_header(buf, n, &h, &need, &err), 0);
		ck_assert_uint_eq(h.version_major, v);
		ck_assert_int_eq(h.dtype, RLB_DT_I32);
		ck_assert_int_eq(h.fortran_order, 0);
		ck_assert_uint_eq(h.ndim, 3);
		ck_assert_uint_eq(h.shape[0], 5);
		ck_assert_uint_eq(h.shape[1], 4);
		ck_assert_uint_eq(h.shape[2], 2);
		ck_assert_uint_eq(h.data_offset, n);
		ck_assert_uint_eq(h.data_offset % 64, 0);
		free(buf);
	}
	/* Other dtypes, key order, double quotes, 1-d and 0-d shapes, Fortran. */
	buf = npy_build(1, "{\"shape\": (7,), \"fortran_order\": True, \"descr\": \"<u2\"}",
			NULL, 0, &n);
	ck_assert_int_eq(rlb_npy_parse_header(buf, n, &h, NULL, &err), 0);
	ck_assert_int_eq(h.dtype, RLB_DT_U16);
	ck_assert_int_eq(h.fortran_order, 1);
	ck_assert_uint_eq(h.ndim, 1);
	ck_assert_uint_eq(h.shape[0], 7);
	free(buf);
	buf = npy_build(1, "{'descr': '|u1', 'fortran_order': False, 'shape': ()}", NULL, 0, &n);
	ck_assert_int_eq(rlb_npy_parse_header(buf, n, &h, NULL, &err), 0);
	ck_assert_int_eq(h.dtype, RLB_DT_U8);
	ck_assert_uint_eq(h.ndim, 0);
	free(buf);
	buf = npy_build(2, "{'descr': '<i8', 'fortran_order': False, 'shape': (3, 61, 8)}",
			NULL, 0, &n);
	ck_assert_int_eq(rlb_npy_parse_header(buf, n, &h, NULL, &err), 0);
	ck_assert_int_eq(h.dtype, RLB_DT_I64);
	ck_assert_uint_eq(h.shape[1], 61);
	free(buf);
}
END_TEST

START_TEST(test_npy_header_bad)
{
	static const struct { const char *dict, *msg; int code; } v[] = {
		{ "{'descr': '<f4', 'fortran_order': False, 'shape': (1,)}",
		  "dtype '<f4' at byte 20 is not an integer type", RLB_EUNSUPPORTED },
		{ "{'descr': '>i4', 'fortran_order': False, 'shape': (1,)}",
		  "dtype '>i4' at byte 20 is big-endian", RLB_EUNSUPPORTED },
		{ "{'descr': '<u8', 'fortran_order': False, 'shape': (1,)}",
		  "dtype '<u8' at byte 20 is not supported (int8-int64, uint8-uint32)",
		  RLB_EUNSUPPORTED },
		{ "{'descr': '<i4', 'fortran_order': False}",
		  "header at byte 10 lacks 'shape'", RLB_EPARSE },
		{ "{'descr': '<i4', 'fortran_order': False, 'shape': (1,), 'x': 1}",
		  "header: unexpected key 'x' at byte 66", RLB_EPARSE },
		{ "{'descr': '<i4', 'fortran_order': No, 'shape': (1,)}",
		  "header: expected True or False at byte 44", RLB_EPARSE },
		{ "{'descr': '<i4', 'fortran_order': False, 'shape': (1, x)}",
		  "header: expected a dimension at byte 64", RLB_EPARSE },
		{ "{'descr': '<i4' 'fortran_order': False, 'shape': (1,)}",
		  "header: expected '}' at byte 26", RLB_EPARSE },
		{ "{'descr': '<i4', 'fortran_order': False, 'shape': (1,)} x",
		  "header: unexpected text after the dictionary at byte 66", RLB_EPARSE },
	};
	struct rlb_err err = { 0, "" };
	struct rlb_npy_header h;
	uint8_t *buf;
	size_t i, n, need;

	for (i = 0; i < sizeof(v) / sizeof(v[0]); i++) {
		buf = npy_build(1, v[i].dict, NULL, 0, &n);
		ck_assert_int_eq(rlb_npy_parse_header(buf, n, &h, NULL, &err), v[i].code);
		ck_assert_str_eq(err.msg, v[i].msg);
		free(buf);
	}
	buf = npy_build(1, "{'descr': '<i4', 'fortran_order': False, 'shape': (2, 4, 2), }",
			NULL, 0, &n);
	/* Bad magic, unknown versions. */
	buf[1] = 'n';
	ck_assert_int_eq(rlb_npy_parse_header(buf, n, &h, NULL, &err), RLB_EPARSE);
	ck_assert_str_eq(err.msg, "not a .npy file: bad magic at byte 0");
	buf[1] = 'N';
	buf[6] = 4;
	ck_assert_int_eq(rlb_npy_parse_header(buf, n, &h, NULL, &err), RLB_EVERSION);
	ck_assert_str_eq(err.msg, "unsupported .npy version 4.0 at byte 6");
	buf[6] = 1;
	buf[7] = 1;
	ck_assert_int_eq(rlb_npy_parse_header(buf, n, &h, NULL, &err), RLB_EVERSION);
	ck_assert_str_eq(err.msg, "unsupported .npy version 1.1 at byte 6");
	buf[7] = 0;
	/* Truncation at every length before the data: ETRUNC with what is needed. */
	for (i = 0; i < n; i++) {
		ck_assert_int_eq(rlb_npy_parse_header(buf, i, &h, &need, &err), RLB_ETRUNC);
		ck_assert_uint_gt(need, i);
		ck_assert_uint_le(need, n);
	}
	/* Every byte of the header replaced by a few values: an answer, never a crash. */
	for (i = 0; i < n; i++) {
		static const uint8_t vals[] = { 0, '\'', '"', '(', ')', ',', ':', '}', '9', 0xff };
		uint8_t keep = buf[i];
		size_t j;

		for (j = 0; j < sizeof(vals); j++) {
			int ret;

			buf[i] = vals[j];
			ret = rlb_npy_parse_header(buf, n, &h, &need, &err);
			ck_assert(ret == 0 || ret == RLB_EPARSE || ret == RLB_ETRUNC ||
				  ret == RLB_EVERSION || ret == RLB_EUNSUPPORTED);
			if (ret == 0)
				ck_assert_uint_le(h.data_offset, n);
		}
		buf[i] = keep;
	}
	ck_assert_int_eq(rlb_npy_parse_header(buf, 9, &h, &need, &err), RLB_ETRUNC);
	ck_assert_str_eq(err.msg, "file ends at byte 9 inside the .npy preamble");
	ck_assert_int_eq(rlb_npy_parse_header(buf, 40, &h, &need, &err), RLB_ETRUNC);
	ck_assert_str_eq(err.msg, "file ends at byte 40 inside the .npy header (118 bytes from byte 10)");
	ck_assert_uint_eq(need, 128);
	free(buf);
}
END_TEST

/* ---- vllm ---------------------------------------------------------------- */

START_TEST(test_vllm_dtypes_and_dense)
{
	static const char *const descr[] = { "<i4", "<u2", "|u1", "<i8" };
	struct rlb_import_opts o = opts_of(RLB_IMPORT_VLLM);
	struct rlb_err err = { 0, "" };
	struct collector c = { 0 };
	struct rlb_config cfg;
	char *dir = tmp_dir(), *p;
	uint8_t *buf;
	size_t i, n;

	/* One file per dtype, with and without a dense layer (zeros / -1). */
	for (i = 0; i < 4; i++) {
		unsigned dense = i % 2;

		tiny_config(&cfg, (int)dense);
		buf = npy_seq(i == 3 ? 2 : 1, descr[i], (unsigned)i, 9, dense,
			      i == 3 ? -1 : 0, &n);
		p = path_in(dir, "seq.npy");
		write_file(p, buf, n);
		ck_assert_msg(rlb_import_to_sink(&o, p, &cfg, collect, &c, NULL, NULL, &err) == 0,
			      "%s: %s", descr[i], err.msg);
		ck_assert_uint_eq(c.n, 1);
		check_ids(&c.v[0], (unsigned)i, 9);
		ck_assert_uint_eq(c.v[0].s.step, 0);
		ck_assert_ptr_null(c.v[0].gates);
		collector_free(&c);
		unlink(p);
		free(p);
		free(buf);
	}
	/* The hidden-layer form also works with the MoE layers only. */
	tiny_config(&cfg, 3);
	buf = npy_seq(1, "<i4", 4, 3, 0, 0, &n);
	p = path_in(dir, "moe-only.npy");
	write_file(p, buf, n);
	ck_assert_int_eq(rlb_import_to_sink(&o, p, &cfg, collect, &c, NULL, NULL, &err), 0);
	check_ids(&c.v[0], 4, 3);
	collector_free(&c);
	unlink(p);
	free(p);
	free(buf);
	rmdir(dir);
	free(dir);
}
END_TEST

START_TEST(test_vllm_directory_names)
{
	static const char *const names[] = {
		"rollout_step10_group0_sample1.npy", "rollout_step2_group3_sample0.npy",
		"rollout_step2_group1_sample0.npy", "notes.txt",
	};
	struct rlb_import_opts o = opts_of(RLB_IMPORT_VLLM);
	struct rlb_err err = { 0, "" };
	struct collector c = { 0 };
	struct rlb_config cfg;
	char *dir = tmp_dir(), *p;
	uint8_t *buf;
	size_t i, n;

	tiny_config(&cfg, 0);
	for (i = 0; i < 4; i++) {
		buf = npy_seq(1, "<i4", (unsigned)i, (unsigned)(2 + i), 0, 0, &n);
		p = path_in(dir, names[i]);
		write_file(p, buf, i == 3 ? 5 : n);
		free(p);
		free(buf);
	}
	ck_assert_msg(rlb_import_to_sink(&o, dir, &cfg, collect, &c, NULL, NULL, &err) == 0,
		      "%s", err.msg);
	/* Step 2 (group 1, then group 3) before step 10; notes.txt ignored. */
	ck_assert_uint_eq(c.n, 3);
	ck_assert_uint_eq(c.v[0].s.step, 2);
	ck_assert_uint_eq(c.v[0].s.group, 1);
	check_ids(&c.v[0], 2, 4);
	ck_assert_uint_eq(c.v[1].s.step, 2);
	ck_assert_uint_eq(c.v[1].s.group, 3);
	check_ids(&c.v[1], 1, 3);
	ck_assert_uint_eq(c.v[2].s.step, 10);
	ck_assert_uint_eq(c.v[2].s.group, 0);
	ck_assert_uint_eq(c.v[2].s.sample, 1);
	check_ids(&c.v[2], 0, 2);
	collector_free(&c);
	/* --step overrides the names: all step 7, name order. */
	o.step = 7;
	ck_assert_int_eq(rlb_import_to_sink(&o, dir, &cfg, collect, &c, NULL, NULL, &err), 0);
	ck_assert_uint_eq(c.n, 3);
	ck_assert_uint_eq(c.v[0].s.step, 7);
	ck_assert_uint_eq(c.v[2].s.step, 7);
	check_ids(&c.v[0], 2, 4);
	check_ids(&c.v[2], 0, 2);
	ck_assert_uint_eq(c.v[0].s.group, 1);	/* names still give groups */
	collector_free(&c);
	for (i = 0; i < 4; i++) {
		p = path_in(dir, names[i]);
		unlink(p);
		free(p);
	}
	/* An empty directory. */
	ck_assert_int_eq(rlb_import_to_sink(&o, dir, &cfg, collect, &c, NULL, NULL, &err),
			 RLB_ENOTFOUND);
	ck_assert_msg(strstr(err.msg, "no *.npy files in"), "%s", err.msg);
	ck_assert_msg(strstr(err.msg, "' (vllm reads arrays written by numpy.save, one .npy "
			     "file per sequence)"), "%s", err.msg);
	rmdir(dir);
	free(dir);
}
END_TEST

/* Import npy bytes as "x.npy" and return the error (path stripped). */
static int vllm_err(const uint8_t *buf, size_t n, const struct rlb_config *cfg,
		    struct rlb_err *err)
{
	struct rlb_import_opts o = opts_of(RLB_IMPORT_VLLM);
	struct collector c = { 0 };
	char *dir = tmp_dir(), *p = path_in(dir, "x.npy");
	int ret;

	write_file(p, buf, n);
	ret = rlb_import_to_sink(&o, p, cfg, collect, &c, NULL, NULL, err);
	ck_assert_uint_eq(c.n, 0);
	if (strncmp(err->msg, dir, strlen(dir)) == 0)
		memmove(err->msg, err->msg + strlen(dir) + 1, strlen(err->msg + strlen(dir)));
	collector_free(&c);
	unlink(p);
	rmdir(dir);
	free(p);
	free(dir);
	return ret;
}

START_TEST(test_vllm_errors)
{
	struct rlb_err err = { 0, "" };
	struct rlb_config cfg;
	uint8_t *buf;
	size_t n, i;

	tiny_config(&cfg, 0);
	/* Truncated data, with the offsets. */
	buf = npy_seq(1, "<i4", 0, 3, 0, 0, &n);
	ck_assert_int_eq(vllm_err(buf, n - 5, &cfg, &err), RLB_ETRUNC);
	ck_assert_str_eq(err.msg, "x.npy: truncated: the array needs 96 bytes from byte 128, "
			 "the file ends at byte 219");
	/* Extra bytes after the array. */
	buf = realloc(buf, n + 3);
	memset(buf + n, 0, 3);
	ck_assert_int_eq(vllm_err(buf, n + 3, &cfg, &err), RLB_ECORRUPT);
	ck_assert_str_eq(err.msg, "x.npy: 3 bytes after the array data at byte 224");
	/* An id out of range, with its byte; -1 in an MoE layer. */
	rlb_put_u32(buf + 128 + 4 * 13, 16);
	ck_assert_int_eq(vllm_err(buf, n, &cfg, &err), RLB_ERANGE);
	ck_assert_str_eq(err.msg, "x.npy: value 16 at row 1, layer 2, column 1 is not an "
			 "expert id in [0, 16) (byte 180)");
	rlb_put_u32(buf + 128 + 4 * 13, 0xffffffffu);
	ck_assert_int_eq(vllm_err(buf, n, &cfg, &err), RLB_ERANGE);
	ck_assert_str_eq(err.msg, "x.npy: value -1 at row 1, layer 2, column 1 is not an "
			 "expert id in [0, 16) (byte 180)");
	free(buf);
	/* Shapes that do not fit the config. */
	{
		uint8_t zeros[256] = { 0 };

		buf = npy_build(1, "{'descr': '<i4', 'fortran_order': False, 'shape': (2, 4, 3), }",
				zeros, 2 * 4 * 3 * 4, &n);
		ck_assert_int_eq(vllm_err(buf, n, &cfg, &err), RLB_EMISMATCH);
		ck_assert_str_eq(err.msg, "x.npy: shape (2, 4, 3): topk 3, the config has 2");
		free(buf);
		buf = npy_build(1, "{'descr': '<i4', 'fortran_order': False, 'shape': (2, 5, 2), }",
				zeros, 2 * 5 * 2 * 4, &n);
		ck_assert_int_eq(vllm_err(buf, n, &cfg, &err), RLB_EMISMATCH);
		ck_assert_str_eq(err.msg, "x.npy: shape (2, 5, 2): 5 layers, the config has 4 MoE layers");
		tiny_config(&cfg, 3);
		ck_assert_int_eq(vllm_err(buf, n, &cfg, &err), RLB_EMISMATCH);
		ck_assert_str_eq(err.msg, "x.npy: shape (2, 5, 2): 5 layers, the config has 7 "
				 "(3 dense + 4 MoE) or 4 MoE layers");
		tiny_config(&cfg, 0);
		free(buf);
		buf = npy_build(1, "{'descr': '<i4', 'fortran_order': False, 'shape': (16, 2), }",
				zeros, 16 * 2 * 4, &n);
		ck_assert_int_eq(vllm_err(buf, n, &cfg, &err), RLB_EMISMATCH);
		ck_assert_str_eq(err.msg, "x.npy: shape has 2 dimensions, expected 3 (tokens, layers, topk)");
		free(buf);
		buf = npy_build(1, "{'descr': '<i4', 'fortran_order': True, 'shape': (2, 4, 2), }",
				zeros, 2 * 4 * 2 * 4, &n);
		ck_assert_int_eq(vllm_err(buf, n, &cfg, &err), RLB_EUNSUPPORTED);
		ck_assert_str_eq(err.msg, "x.npy: fortran_order True is not supported "
				 "(save a C-order array: np.ascontiguousarray)");
		free(buf);
	}
	/* Cut at every length: an error naming the file, never a crash. */
	buf = npy_seq(2, "<u2", 0, 3, 0, 0, &n);
	for (i = 0; i < n; i++) {
		ck_assert_int_ne(vllm_err(buf, i, &cfg, &err), 0);
		ck_assert_msg(strncmp(err.msg, "x.npy: ", 7) == 0, "%s", err.msg);
	}
	free(buf);
	/* A file cut inside the header. */
	buf = npy_seq(1, "<i4", 0, 3, 0, 0, &n);
	ck_assert_int_eq(vllm_err(buf, 30, &cfg, &err), RLB_ETRUNC);
	ck_assert_str_eq(err.msg, "x.npy: file ends at byte 30 inside the .npy header "
			 "(118 bytes from byte 10)");
	ck_assert_int_eq(vllm_err(buf, 4, &cfg, &err), RLB_ETRUNC);
	ck_assert_str_eq(err.msg, "x.npy: file ends at byte 4 inside the .npy preamble");
	buf[0] = 'x';
	ck_assert_int_eq(vllm_err(buf, n, &cfg, &err), RLB_EPARSE);
	ck_assert_str_eq(err.msg, "x.npy: not a .npy file: bad magic at byte 0");
	free(buf);
	/* What vLLM users save instead: the message says what it is. */
	{
		static const struct { const char *data, *msg; } v[] = {
			{ "PK\x03\x04\x14\0\0\0\0\0\0\0\0\0",
			  "x.npy: not a .npy file: bad magic at byte 0 (a zip archive: an .npz "
			  "from numpy.savez or a torch.save file; write each sequence's array "
			  "with numpy.save)" },
			{ "\x80\x02\x8a\x0a" "lZ\xfc\x9c" "F\xf9 j\xa8",
			  "x.npy: not a .npy file: bad magic at byte 0 (a Python pickle, such "
			  "as a legacy torch.save file; write each sequence's array with "
			  "numpy.save)" },
			{ "\n {\"choices\": [{\"routed_experts\": [[[1, 2]]]}]}\n",
			  "x.npy: not a .npy file: bad magic at byte 0 (JSON text: convert it "
			  "to relibra's jsonl format, docs/jsonl-format.md, and use --from jsonl)" },
		};

		for (i = 0; i < sizeof(v) / sizeof(v[0]); i++) {
			ck_assert_int_eq(vllm_err((const uint8_t *)v[i].data, 14, &cfg, &err),
					 RLB_EPARSE);
			ck_assert_str_eq(err.msg, v[i].msg);
		}
	}
	/* An object array (ragged sequences in one np.save), a batch of them. */
	buf = npy_build(1, "{'descr': '|O', 'fortran_order': False, 'shape': (2,), }",
			"\x80\x02", 2, &n);
	ck_assert_int_eq(vllm_err(buf, n, &cfg, &err), RLB_EUNSUPPORTED);
	ck_assert_str_eq(err.msg, "x.npy: dtype '|O' at byte 20 is an object array (arrays "
			 "of different lengths saved as one: write one file per sequence)");
	free(buf);
	{
		uint8_t zeros[256] = { 0 };

		buf = npy_build(1, "{'descr': '<i2', 'fortran_order': False, "
				"'shape': (2, 3, 4, 2), }", zeros, 2 * 3 * 4 * 2 * 2, &n);
		ck_assert_int_eq(vllm_err(buf, n, &cfg, &err), RLB_EMISMATCH);
		ck_assert_str_eq(err.msg, "x.npy: shape has 4 dimensions, expected 3 (tokens, "
				 "layers, topk); a batch of sequences: write one file per "
				 "sequence, without padding rows");
		free(buf);
	}
}
END_TEST

/* ---- sglang -------------------------------------------------------------- */

START_TEST(test_sglang_dtypes_dense)
{
	static const char *const dtypes[] = { NULL, "int32", "uint16", "uint8" };
	struct rlb_import_opts o = opts_of(RLB_IMPORT_SGLANG);
	struct rlb_err err = { 0, "" };
	struct collector c = { 0 };
	struct rlb_config cfg;
	char *text = NULL;
	unsigned i;

	/* DeepSeek-like: 1 dense layer, zeros (int32, uint*) or -1 (int32). */
	tiny_config(&cfg, 1);
	for (i = 0; i < 4; i++)
		text = cat(text, sg_line(i, 0, 3 + i, 1, i == 1 ? -1 : 0, dtypes[i],
					 NULL, NULL));
	/* A record holding the MoE layers only, and an empty line. */
	text = cat(text, sg_line(4, 0, 2, 0, 0, "uint8", NULL, NULL));
	text = cat(text, strdup("   \n\n"));
	ck_assert_msg(import_text(text, &o, &cfg, &c, &err, "s.jsonl") == 0, "%s", err.msg);
	ck_assert_uint_eq(c.n, 5);
	for (i = 0; i < 5; i++) {
		check_ids(&c.v[i], i, i < 4 ? 3 + i : 2);
		ck_assert_uint_eq(c.v[i].s.step, 0);
		ck_assert_uint_eq(c.v[i].s.group, i);	/* each its own group */
		ck_assert_uint_eq(c.v[i].s.sample, 0);
	}
	collector_free(&c);
	free(text);
}
END_TEST

START_TEST(test_sglang_ids_and_array)
{
	struct rlb_import_opts o = opts_of(RLB_IMPORT_SGLANG);
	struct rlb_err err = { 0, "" };
	struct collector c = { 0 };
	struct rlb_config cfg;
	char *text = NULL, *a, *b;

	tiny_config(&cfg, 0);
	text = cat(text, sg_line(0, 0, 2, 0, 0, NULL, "\"step\": 3, \"group\": 5, ", NULL));
	text = cat(text, sg_line(1, 0, 2, 0, 0, NULL, "\"step\": 3, \"group\": 5, ", NULL));
	text = cat(text, sg_line(2, 0, 2, 0, 0, NULL, "\"step\": 3, \"group\": 6, \"index\": 4, ", NULL));
	/* A batch response: a JSON array of responses on one line. */
	a = sg_line(3, 0, 1, 0, 0, NULL, "\"step\": 4, ", NULL);
	b = sg_line(4, 0, 1, 0, 0, NULL, "\"step\": 4, ", NULL);
	a[strlen(a) - 1] = '\0';
	b[strlen(b) - 1] = '\0';
	text = cat(text, strdup("["));
	text = cat(text, a);
	text = cat(text, strdup(", "));
	text = cat(text, b);
	text = cat(text, strdup("]\n"));
	ck_assert_msg(import_text(text, &o, &cfg, &c, &err, "s.jsonl") == 0, "%s", err.msg);
	ck_assert_uint_eq(c.n, 5);
	ck_assert_uint_eq(c.v[0].s.step, 3);
	ck_assert_uint_eq(c.v[0].s.group, 5);
	ck_assert_uint_eq(c.v[0].s.sample, 0);
	ck_assert_uint_eq(c.v[1].s.group, 5);
	ck_assert_uint_eq(c.v[1].s.sample, 1);
	ck_assert_uint_eq(c.v[2].s.group, 6);
	ck_assert_uint_eq(c.v[2].s.sample, 4);
	ck_assert_uint_eq(c.v[3].s.step, 4);
	ck_assert_uint_eq(c.v[3].s.group, 0);
	ck_assert_uint_eq(c.v[4].s.group, 1);
	check_ids(&c.v[3], 3, 1);
	check_ids(&c.v[4], 4, 1);
	collector_free(&c);

	/* Options: --group-size 2 numbers groups in order, per step. */
	o.group_size = 2;
	o.group = 10;
	ck_assert_int_eq(import_text(text, &o, &cfg, &c, &err, "s.jsonl"), 0);
	ck_assert_uint_eq(c.v[0].s.group, 10);
	ck_assert_uint_eq(c.v[1].s.group, 10);
	ck_assert_uint_eq(c.v[1].s.sample, 1);
	ck_assert_uint_eq(c.v[2].s.group, 11);
	ck_assert_uint_eq(c.v[2].s.sample, 0);
	ck_assert_uint_eq(c.v[3].s.group, 10);
	collector_free(&c);
	/* --group: one group, samples in order unless given; --step overrides. */
	o.group_size = 0;
	o.group = 2;
	o.step = 9;
	ck_assert_int_eq(import_text(text, &o, &cfg, &c, &err, "s.jsonl"), 0);
	ck_assert_uint_eq(c.v[0].s.step, 9);
	ck_assert_uint_eq(c.v[4].s.step, 9);
	ck_assert_uint_eq(c.v[0].s.group, 2);
	ck_assert_uint_eq(c.v[1].s.sample, 1);
	ck_assert_uint_eq(c.v[2].s.sample, 4);
	ck_assert_uint_eq(c.v[4].s.group, 2);
	ck_assert_uint_eq(c.v[4].s.sample, 4);
	collector_free(&c);
	free(text);
}
END_TEST

START_TEST(test_sglang_incremental)
{
	struct rlb_import_opts o = opts_of(RLB_IMPORT_SGLANG);
	struct rlb_err err = { 0, "" };
	struct collector c = { 0 };
	struct rlb_config cfg;
	char *text = NULL, *l;

	tiny_config(&cfg, 1);
	/*
	 * Sequence 0 in three chunks (rows 0-3, 4-5, then 5-8 redoing row 5),
	 * interleaved with sequence 1 in one chunk and a complete sequence 2.
	 */
	text = cat(text, sg_line(0, 0, 4, 1, 0, NULL, NULL, ", \"routed_experts_start_len\": 0"));
	text = cat(text, sg_line(1, 0, 3, 1, 0, NULL, NULL, ", \"routed_experts_start_len\": 0"));
	text = cat(text, sg_line(0, 4, 2, 1, 0, NULL, NULL, ", \"routed_experts_start_len\": 4"));
	text = cat(text, sg_line(2, 0, 2, 1, 0, NULL, NULL, NULL));
	text = cat(text, sg_line(0, 5, 4, 1, 0, NULL, NULL, ", \"routed_experts_start_len\": 5"));
	ck_assert_msg(import_text(text, &o, &cfg, &c, &err, "s.jsonl") == 0, "%s", err.msg);
	ck_assert_uint_eq(c.n, 3);
	check_ids(&c.v[0], 2, 2);	/* complete at once */
	check_ids(&c.v[1], 0, 9);	/* joined at the end of the input, in order */
	check_ids(&c.v[2], 1, 3);
	collector_free(&c);
	/* A later step closes the pending sequences of earlier ones. */
	l = sg_line(3, 0, 2, 1, 0, NULL, "\"step\": 1, ", NULL);
	text = cat(text, l);
	ck_assert_int_eq(import_text(text, &o, &cfg, &c, &err, "s.jsonl"), 0);
	ck_assert_uint_eq(c.n, 4);
	check_ids(&c.v[1], 0, 9);
	check_ids(&c.v[3], 3, 2);
	ck_assert_uint_eq(c.v[3].s.step, 1);
	collector_free(&c);
	free(text);
	/* A continuation without its start, and one past the rows received. */
	text = sg_line(0, 4, 2, 1, 0, NULL, NULL, ", \"routed_experts_start_len\": 4");
	ck_assert_int_eq(import_text(text, &o, &cfg, &c, &err, "s.jsonl"), RLB_EINVAL);
	ck_assert_str_eq(err.msg, "s.jsonl:1: meta_info.routed_experts_start_len: 4 but no "
			 "earlier record of sequence 'r0' in step 0 (keyed by meta_info.id, "
			 "each request's own id: put the same top-level sequence_id on every "
			 "turn of a sequence)");
	free(text);
	/*
	 * Two turns as SGLang answers them: each request has its own id, so
	 * only a sequence_id the saver adds joins them.
	 */
	text = cat(sg_line(0, 0, 4, 1, 0, NULL, NULL, ", \"routed_experts_start_len\": 0"),
		   sg_line(0, 4, 3, 1, 0, NULL, NULL, ", \"routed_experts_start_len\": 4"));
	memcpy(strstr(strstr(text, "\n"), "\"r0\"") + 1, "t2", 2);
	ck_assert_int_eq(import_text(text, &o, &cfg, &c, &err, "s.jsonl"), RLB_EINVAL);
	ck_assert_msg(strstr(err.msg, "s.jsonl:2: meta_info.routed_experts_start_len: 4 but "
				    "no earlier record of sequence 't2' in step 0 (keyed by"),
		      "%s", err.msg);
	free(text);
	text = cat(sg_line(0, 0, 4, 1, 0, NULL, "\"sequence_id\": 7, ",
			   ", \"routed_experts_start_len\": 0"),
		   sg_line(0, 4, 3, 1, 0, NULL, "\"sequence_id\": 7, ",
			   ", \"routed_experts_start_len\": 4"));
	memcpy(strstr(strstr(text, "\n"), "\"r0\"") + 1, "t2", 2);
	ck_assert_msg(import_text(text, &o, &cfg, &c, &err, "s.jsonl") == 0, "%s", err.msg);
	ck_assert_uint_eq(c.n, 1);
	check_ids(&c.v[0], 0, 7);
	collector_free(&c);
	free(text);
	/* Keyed by sequence_id, a continuation without its start has no hint. */
	text = sg_line(0, 4, 2, 1, 0, NULL, "\"sequence_id\": \"a\", ",
		       ", \"routed_experts_start_len\": 4");
	ck_assert_int_eq(import_text(text, &o, &cfg, &c, &err, "s.jsonl"), RLB_EINVAL);
	ck_assert_str_eq(err.msg, "s.jsonl:1: meta_info.routed_experts_start_len: 4 but no "
			 "earlier record of sequence 'a' in step 0");
	free(text);
	text = cat(sg_line(0, 0, 2, 1, 0, NULL, NULL, ", \"routed_experts_start_len\": 0"),
		   sg_line(0, 3, 2, 1, 0, NULL, NULL, ", \"routed_experts_start_len\": 3"));
	ck_assert_int_eq(import_text(text, &o, &cfg, &c, &err, "s.jsonl"), RLB_EINVAL);
	ck_assert_str_eq(err.msg, "s.jsonl:2: meta_info.routed_experts_start_len: 3 is past "
			 "the 2 rows of sequence 'r0' received so far");
	free(text);
	collector_free(&c);
}
END_TEST

START_TEST(test_sglang_gates)
{
	struct rlb_import_opts o = opts_of(RLB_IMPORT_SGLANG);
	struct rlb_err err = { 0, "" };
	struct collector c = { 0 };
	struct rlb_config cfg;
	char *line, *g, meta[4096];
	uint8_t *gb;
	size_t n;
	unsigned t, l, k;

	tiny_config(&cfg, 1);
	gb = gate_bytes(0, 3, 1, &n);
	g = b64(gb, n);
	snprintf(meta, sizeof(meta), ", \"routed_experts_gates\": \"%s\"", g);
	line = sg_line(0, 0, 3, 1, 0, NULL, NULL, meta);
	o.gates = 1;
	ck_assert_msg(import_text(line, &o, &cfg, &c, &err, "s.jsonl") == 0, "%s", err.msg);
	ck_assert_uint_eq(c.n, 1);
	check_ids(&c.v[0], 0, 3);
	ck_assert_ptr_nonnull(c.v[0].gates);
	for (l = 0; l < L; l++)
		for (t = 0; t < 3; t++)
			for (k = 0; k < K; k++)
				ck_assert(c.v[0].gates[(l * 3 + t) * K + k] == gate_at(0, t, l, k));
	collector_free(&c);
	/* Without --gates they are dropped. */
	o.gates = 0;
	ck_assert_int_eq(import_text(line, &o, &cfg, &c, &err, "s.jsonl"), 0);
	ck_assert_ptr_null(c.v[0].gates);
	collector_free(&c);
	free(line);
	/* --gates with a record that has none. */
	o.gates = 1;
	line = sg_line(0, 0, 3, 1, 0, NULL, NULL, NULL);
	ck_assert_int_eq(import_text(line, &o, &cfg, &c, &err, "s.jsonl"), RLB_EPARSE);
	ck_assert_str_eq(err.msg, "s.jsonl:1: meta_info.routed_experts_gates: missing "
			 "(--gates needs gate weights in every record)");
	free(line);
	free(g);
	free(gb);
}
END_TEST

/* A gate weight that is negative or not finite (float32 bits) is refused. */
START_TEST(test_sglang_bad_gates)
{
	static const struct {
		uint32_t bits;
		const char *msg;	/* NULL: imports */
	} v[] = {
		{ 0x7fc00000u, "s.jsonl:2: meta_info.routed_experts_gates: value nan at row 2, "
			       "layer 3, column 1 is not a finite non-negative float32" },
		{ 0x7f800000u, "s.jsonl:2: meta_info.routed_experts_gates: value inf at row 2, "
			       "layer 3, column 1 is not a finite non-negative float32" },
		{ 0xff800000u, "s.jsonl:2: meta_info.routed_experts_gates: value -inf at row 2, "
			       "layer 3, column 1 is not a finite non-negative float32" },
		{ 0xc0400000u, "s.jsonl:2: meta_info.routed_experts_gates: value -3 at row 2, "
			       "layer 3, column 1 is not a finite non-negative float32" },
		{ 0x80000000u, NULL },	/* -0 */
		{ 0x7f7fffffu, NULL },	/* FLT_MAX */
	};
	struct rlb_import_opts o = opts_of(RLB_IMPORT_SGLANG);
	struct rlb_err err = { 0, "" };
	struct collector c = { 0 };
	struct rlb_config cfg;
	char *text, *g, meta[4096];
	uint8_t *gb;
	size_t n, i;

	tiny_config(&cfg, 1);
	o.gates = 1;
	for (i = 0; i < sizeof(v) / sizeof(v[0]); i++) {
		gb = gate_bytes(1, 3, 1, &n);
		/* row 2, input layer 3 (MoE layer 2 after the dense one), column 1 */
		rlb_put_u32(gb + 4 * ((2 * 5 + 3) * K + 1), v[i].bits);
		/* a dense layer's value is not looked at */
		rlb_put_u32(gb + 4 * ((1 * 5 + 0) * K + 0), 0x7fc00000u);
		g = b64(gb, n);
		snprintf(meta, sizeof(meta), ", \"routed_experts_gates\": \"%s\"", g);
		free(g);
		free(gb);
		text = sg_line(1, 0, 3, 1, 0, NULL, NULL, meta);
		gb = gate_bytes(0, 2, 1, &n);
		g = b64(gb, n);
		snprintf(meta, sizeof(meta), ", \"routed_experts_gates\": \"%s\"", g);
		text = cat(sg_line(0, 0, 2, 1, 0, NULL, NULL, meta), text);
		free(g);
		free(gb);
		if (!v[i].msg) {
			ck_assert_msg(import_text(text, &o, &cfg, &c, &err, "s.jsonl") == 0,
				      "%s", err.msg);
			ck_assert_uint_eq(c.n, 2);
		} else {
			ck_assert_int_eq(import_text(text, &o, &cfg, &c, &err, "s.jsonl"),
					 RLB_ERANGE);
			ck_assert_str_eq(err.msg, v[i].msg);
			ck_assert_uint_eq(c.n, 1);	/* the first record went through */
		}
		collector_free(&c);
		free(text);
	}
}
END_TEST

START_TEST(test_sglang_errors)
{
	static const struct { const char *line, *msg; } v[] = {
		{ "{\"meta_info\": {}}\n",
		  "s.jsonl:1: meta_info.routed_experts: missing (send requests with return_routed_experts)" },
		{ "{\"text\": 1}\n", "s.jsonl:1: meta_info: missing (expected a /generate "
		  "response, or an OpenAI-compatible one with sglext.routed_experts)" },
		{ "{\"meta_info\": 5}\n", "s.jsonl:1: meta_info: expected an object" },
		{ "{\"meta_info\": {\"routed_experts\": \"AAAA!AAA\"}}\n",
		  "s.jsonl:1: meta_info.routed_experts: invalid base64 character '!' at byte 4" },
		{ "{\"meta_info\": {\"routed_experts\": 5}}\n",
		  "s.jsonl:1: meta_info.routed_experts: expected a base64 string" },
		{ "{\"meta_info\": {\"routed_experts\": \"AAAA\", \"routed_experts_dtype\": \"int8\"}}\n",
		  "s.jsonl:1: meta_info.routed_experts_dtype: expected \"int32\", \"uint16\" or \"uint8\"" },
		{ "{\"meta_info\": {\"routed_experts\": \"AAAA\"}}\n",
		  "s.jsonl:1: meta_info.routed_experts: 3 bytes is not a multiple of 4 (the dtype's size)" },
		{ "{\"step\": -1, \"meta_info\": {\"routed_experts\": \"\"}}\n",
		  "s.jsonl:1: step: expected an integer in [0, 4294967295]" },
		{ "{\"meta_info\": {\"routed_experts\": \"\"}\n",
		  "s.jsonl:1:37: invalid JSON: '}' expected near end of file" },
		{ "[1]\n", "s.jsonl:1: [0]: expected a JSON object" },
		{ "{\"meta_info\": {\"routed_experts\": \"\", \"routed_experts_start_len\": 0}}\n",
		  "s.jsonl:1: meta_info.id: missing (needed to join routed_experts_start_len chunks)" },
		{ "{\"meta_info\": {\"routed_experts\": \"\", \"prompt_tokens\": 9223372036854775807, "
		  "\"completion_tokens\": 9223372036854775807}}\n",
		  "s.jsonl:1: meta_info.prompt_tokens: expected an integer in [0, 4294967295]" },
		{ "{\"meta_info\": {\"routed_experts\": \"\", \"prompt_tokens\": 2, "
		  "\"completion_tokens\": -1}}\n",
		  "s.jsonl:1: meta_info.completion_tokens: expected an integer in [0, 4294967295]" },
	};
	struct rlb_import_opts o = opts_of(RLB_IMPORT_SGLANG);
	struct rlb_err err = { 0, "" };
	struct collector c = { 0 };
	struct rlb_config cfg;
	char *text;
	size_t i;

	tiny_config(&cfg, 0);
	for (i = 0; i < sizeof(v) / sizeof(v[0]); i++) {
		ck_assert_int_ne(import_text(v[i].line, &o, &cfg, &c, &err, "s.jsonl"), 0);
		ck_assert_str_eq(err.msg, v[i].msg);
		collector_free(&c);
	}
	/* 4800 int32 values with 48 layers x 8: not a whole number of rows. */
	cfg.model.experts = 128;
	cfg.model.topk = 8;
	cfg.model.moe_layers = 48;
	{
		uint8_t *zeros = calloc(4800, 4);
		char *enc = b64(zeros, 4800 * 4);

		ck_assert_int_ge(asprintf(&text, "\n{\"meta_info\": {\"routed_experts\": \"%s\"}}\n",
					  enc), 0);
		ck_assert_int_eq(import_text(text, &o, &cfg, &c, &err, "sglang.jsonl"), RLB_EMISMATCH);
		ck_assert_str_eq(err.msg, "sglang.jsonl:2: meta_info.routed_experts: 4800 values is "
				 "not a multiple of 48 layers x 8 (topk)");
		cfg.model.first_dense_layers = 3;
		ck_assert_int_eq(import_text(text, &o, &cfg, &c, &err, "sglang.jsonl"), RLB_EMISMATCH);
		ck_assert_str_eq(err.msg, "sglang.jsonl:2: meta_info.routed_experts: 4800 values is "
				 "not a multiple of 51 layers x 8 (topk) nor of 48 MoE layers x 8");
		free(text);
		free(zeros);
		free(enc);
	}
	/* -1 in an MoE layer (input layer 1, after the dense layer 0). */
	tiny_config(&cfg, 1);
	{
		size_t n;
		uint8_t *bytes = routing_bytes(1, 0, 2, 1, -1, 4, &n);

		rlb_put_u32(bytes + 4 * (1 * 5 * K + 1 * K + 1), 0xffffffffu);
		text = cat(sg_line(0, 0, 2, 1, 0, NULL, NULL, NULL),
			   sg_line_bytes(1, bytes, n, NULL, NULL, NULL));
	}
	ck_assert_int_eq(import_text(text, &o, &cfg, &c, &err, "s.jsonl"), RLB_ERANGE);
	ck_assert_str_eq(err.msg, "s.jsonl:2: meta_info.routed_experts: value -1 at row 1, "
			 "layer 1, column 1 is not an expert id in [0, 16)");
	ck_assert_uint_eq(c.n, 1);	/* the first record went through */
	collector_free(&c);
	free(text);
	text = cat(sg_line(0, 0, 2, 0, 0, NULL, "\"step\": 2, ", NULL),
		   sg_line(1, 0, 2, 0, 0, NULL, "\"step\": 1, ", NULL));
	ck_assert_int_eq(import_text(text, &o, &cfg, &c, &err, "s.jsonl"), RLB_EINVAL);
	ck_assert_str_eq(err.msg, "s.jsonl:2: step: 1 comes after step 2 (steps must not decrease)");
	collector_free(&c);
	free(text);
	/* A sink failure stops the import with the sink's message. */
	c.fail_at = 2;
	text = cat(sg_line(0, 0, 2, 0, 0, NULL, NULL, NULL), sg_line(1, 0, 2, 0, 0, NULL, NULL, NULL));
	ck_assert_int_eq(import_text(text, &o, &cfg, &c, &err, "s.jsonl"), RLB_EIO);
	ck_assert_str_eq(err.msg, "s.jsonl:2: sink refused");
	collector_free(&c);
	free(text);
	/* No records at all. */
	ck_assert_int_eq(import_text("\n \n", &o, &cfg, &c, &err, "s.jsonl"), RLB_EINVAL);
	ck_assert_msg(strstr(err.msg, "/s.jsonl' holds no records"), "%s", err.msg);
}
END_TEST

/*
 * A streamed request: SGLang attaches the routed experts to the last chunk
 * only (when the request finishes); the chunks before it have
 * meta_info.finish_reason null and no routing, and are skipped.
 */
START_TEST(test_sglang_stream_chunks)
{
	static const char chunk[] =
		"{\"text\": \"x\", \"meta_info\": {\"id\": \"r0\", \"finish_reason\": null, "
		"\"prompt_tokens\": 3, \"completion_tokens\": 1}}\n";
	struct rlb_import_opts o = opts_of(RLB_IMPORT_SGLANG);
	struct rlb_import_stats stats;
	struct rlb_err err = { 0, "" };
	struct collector c = { 0 };
	struct rlb_config cfg;
	char *text, *cut;

	tiny_config(&cfg, 1);
	o.stats = &stats;
	text = cat(strdup(chunk), strdup(chunk));
	text = cat(text, sg_line(0, 0, 4, 1, 0, NULL, NULL,
				 ", \"finish_reason\": {\"type\": \"length\"}"));
	ck_assert_msg(import_text(text, &o, &cfg, &c, &err, "s.jsonl") == 0, "%s", err.msg);
	ck_assert_uint_eq(c.n, 1);
	check_ids(&c.v[0], 0, 4);
	ck_assert_uint_eq(stats.unfinished, 0);
	collector_free(&c);
	/* Streams cut off before their last chunk (ids r7, 8) are counted. */
	cut = strdup(chunk);
	memcpy(strstr(cut, "\"r0\""), "\"r7\"", 4);
	text = cat(text, cut);
	text = cat(text, strdup("{\"meta_info\": {\"id\": 8, \"finish_reason\": null}}\n"));
	text = cat(text, strdup("{\"meta_info\": {\"id\": 8, \"finish_reason\": null}}\n"));
	ck_assert_msg(import_text(text, &o, &cfg, &c, &err, "s.jsonl") == 0, "%s", err.msg);
	ck_assert_uint_eq(c.n, 1);
	ck_assert_uint_eq(stats.unfinished, 2);
	collector_free(&c);
	free(text);
	/* Only unfinished chunks: no routing at all. */
	ck_assert_int_eq(import_text(chunk, &o, &cfg, &c, &err, "s.jsonl"), RLB_EINVAL);
	ck_assert_msg(strstr(err.msg, "holds no routing of the model's layers (1 record read)"),
		      "%s", err.msg);
	/* A finished response without routing is still an error. */
	ck_assert_int_eq(import_text("{\"meta_info\": {\"finish_reason\": {\"type\": \"stop\"}}}\n",
				     &o, &cfg, &c, &err, "s.jsonl"), RLB_EPARSE);
	ck_assert_str_eq(err.msg, "s.jsonl:1: meta_info.routed_experts: missing "
			 "(send requests with return_routed_experts)");
	collector_free(&c);
}
END_TEST

/*
 * An OpenAI-compatible response (/v1/chat/completions) of sequence s, rows
 * rows of `dense` + L layers: SGLang puts the routing in sglext, the token
 * counts in usage; CHOICES is the choices array's text.
 */
static char *oa_line(unsigned s, unsigned rows, unsigned dense, const char *object,
		     const char *choices, const char *usage)
{
	size_t n;
	uint8_t *bytes = routing_bytes(s, 0, rows, dense, 0, 4, &n);
	char *enc = b64(bytes, n), *line;

	ck_assert_int_ge(asprintf(&line, "{\"id\": \"chatcmpl-%u\", \"object\": \"%s\", "
				  "\"choices\": %s%s%s, \"sglext\": {\"routed_experts\": \"%s\"}}\n",
				  s, object, choices, usage ? ", \"usage\": " : "",
				  usage ? usage : "", enc), 0);
	free(bytes);
	free(enc);
	return line;
}

START_TEST(test_sglang_openai)
{
	static const char one[] = "[{\"index\": 0, \"message\": {\"role\": \"assistant\", "
				  "\"content\": \"x\"}, \"finish_reason\": \"stop\"}]";
	static const char two[] = "[{\"index\": 0}, {\"index\": 1}]";
	static const char usage[] = "{\"prompt_tokens\": 4, \"completion_tokens\": 2, "
				    "\"total_tokens\": 6}";
	static const char delta[] = "{\"id\": \"chatcmpl-1\", \"object\": "
				    "\"chat.completion.chunk\", \"choices\": [{\"index\": 0, "
				    "\"delta\": {\"content\": \"x\"}}]}\n";
	static const char delta2[] = "{\"id\": \"chatcmpl-2\", \"object\": "
				     "\"chat.completion.chunk\", \"choices\": [{\"index\": 0, "
				     "\"delta\": {\"content\": \"y\"}}]}\n";
	static const char usage2[] = "{\"id\": \"chatcmpl-2\", \"object\": "
				     "\"chat.completion.chunk\", \"choices\": [], \"usage\": "
				     "{\"prompt_tokens\": 4, \"completion_tokens\": 1}}\n";
	struct rlb_import_opts o = opts_of(RLB_IMPORT_SGLANG);
	struct rlb_import_stats stats;
	struct rlb_err err = { 0, "" };
	struct collector c = { 0 };
	struct rlb_config cfg;
	char *text;

	tiny_config(&cfg, 1);
	/* Non-streamed: all hidden layers, and MoE layers only where only the
	 * usage counts (4 + 2 - 1 = 5 rows) tell the shapes apart. */
	text = cat(oa_line(0, 3, 1, "chat.completion", one, usage),
		   oa_line(1, 5, 0, "text_completion", one, usage));
	ck_assert_msg(import_text(text, &o, &cfg, &c, &err, "s.jsonl") == 0, "%s", err.msg);
	ck_assert_uint_eq(c.n, 2);
	check_ids(&c.v[0], 0, 3);
	check_ids(&c.v[1], 1, 5);
	collector_free(&c);
	free(text);
	/* With n > 1 the usage counts sum the choices: no hint. */
	text = oa_line(1, 5, 0, "chat.completion", two, usage);
	ck_assert_int_eq(import_text(text, &o, &cfg, &c, &err, "s.jsonl"), 0);
	ck_assert_uint_eq(c.v[0].s.tokens, 4);
	collector_free(&c);
	free(text);
	/*
	 * Streamed: delta chunks carry no routing; a chunk of its own does,
	 * and with stream_options include_usage a chunk without choices
	 * follows it.  chatcmpl-2 finished; chatcmpl-1 never did.
	 */
	text = cat(strdup(delta), strdup(delta2));
	text = cat(text, oa_line(2, 4, 1, "chat.completion.chunk", "[]", NULL));
	text = cat(text, strdup(delta));
	text = cat(text, strdup(usage2));
	o.stats = &stats;
	ck_assert_msg(import_text(text, &o, &cfg, &c, &err, "s.jsonl") == 0, "%s", err.msg);
	ck_assert_uint_eq(c.n, 1);
	check_ids(&c.v[0], 2, 4);
	ck_assert_uint_eq(stats.unfinished, 1);
	collector_free(&c);
	free(text);
	/*
	 * Streamed /v1/completions chunks may be named "text_completion" like
	 * the whole response: without routing, one whose choices have not
	 * finished is a chunk, one without choices the usage chunk.
	 */
	text = strdup("{\"id\": \"chatcmpl-3\", \"object\": \"text_completion\", "
		      "\"choices\": [{\"index\": 0, \"text\": \"z\", \"finish_reason\": null}]}\n");
	text = cat(text, strdup("{\"id\": \"chatcmpl-4\", \"object\": \"text_completion\", "
				"\"choices\": [{\"index\": 0, \"text\": \"w\"}]}\n"));
	text = cat(text, oa_line(3, 4, 1, "text_completion",
				 "[{\"index\": 0, \"text\": \"z\", \"finish_reason\": \"stop\"}]", NULL));
	text = cat(text, strdup("{\"id\": \"chatcmpl-3\", \"object\": \"text_completion\", "
				"\"choices\": [], \"usage\": {\"prompt_tokens\": 4}}\n"));
	ck_assert_msg(import_text(text, &o, &cfg, &c, &err, "s.jsonl") == 0, "%s", err.msg);
	ck_assert_uint_eq(c.n, 1);
	check_ids(&c.v[0], 3, 4);
	ck_assert_uint_eq(stats.unfinished, 1);	/* chatcmpl-4 */
	o.stats = NULL;
	collector_free(&c);
	free(text);
	ck_assert_int_eq(import_text("{\"object\": \"text_completion\", \"choices\": "
				     "[{\"index\": 0, \"finish_reason\": \"stop\"}]}\n",
				     &o, &cfg, &c, &err, "s.jsonl"), RLB_EPARSE);
	ck_assert_str_eq(err.msg, "s.jsonl:1: sglext.routed_experts: missing "
			 "(send requests with return_routed_experts)");
	/* A response without routing, and a bad sglext. */
	ck_assert_int_eq(import_text("{\"object\": \"chat.completion\", \"choices\": []}\n",
				     &o, &cfg, &c, &err, "s.jsonl"), RLB_EPARSE);
	ck_assert_str_eq(err.msg, "s.jsonl:1: sglext.routed_experts: missing "
			 "(send requests with return_routed_experts)");
	/* vLLM's OpenAI-compatible response: routing as JSON lists, no sglext. */
	ck_assert_int_eq(import_text("{\"object\": \"chat.completion\", \"choices\": "
				     "[{\"index\": 0, \"routed_experts\": [[[1, 2]]]}], "
				     "\"prompt_routed_experts\": [[[3, 4]]]}\n",
				     &o, &cfg, &c, &err, "s.jsonl"), RLB_EPARSE);
	ck_assert_str_eq(err.msg, "s.jsonl:1: choices[0].routed_experts: a vLLM response "
			 "(routing as JSON lists), not SGLang's: convert it to the jsonl "
			 "format (docs/jsonl-format.md) and use --from jsonl");
	ck_assert_int_eq(import_text("{\"choices\": [], \"sglext\": 5}\n",
				     &o, &cfg, &c, &err, "s.jsonl"), RLB_EPARSE);
	ck_assert_str_eq(err.msg, "s.jsonl:1: sglext: expected an object");
	ck_assert_int_eq(import_text("{\"sglext\": {\"routed_experts\": \"AAAA\"}}\n",
				     &o, &cfg, &c, &err, "s.jsonl"), RLB_EPARSE);
	ck_assert_str_eq(err.msg, "s.jsonl:1: sglext.routed_experts: 3 bytes is not a "
			 "multiple of 4 (the dtype's size)");
	ck_assert_int_eq(import_text("{\"choices\": [], \"usage\": {\"prompt_tokens\": -2}, "
				     "\"sglext\": {\"routed_experts\": \"\"}}\n",
				     &o, &cfg, &c, &err, "s.jsonl"), RLB_EPARSE);
	ck_assert_str_eq(err.msg, "s.jsonl:1: usage.prompt_tokens: expected an integer "
			 "in [0, 4294967295]");
	collector_free(&c);
}
END_TEST

/* The prompt/completion token counts settle a row count both layer counts divide. */
START_TEST(test_sglang_rows_hint)
{
	struct rlb_import_opts o = opts_of(RLB_IMPORT_SGLANG);
	struct rlb_err err = { 0, "" };
	struct collector c = { 0 };
	struct rlb_config cfg;
	char *text;

	/* 1 dense + 4 MoE layers x 2: 4 MoE-only rows = 32 values = 3.2 hidden rows;
	 * 5 MoE-only rows = 40 values = 4 hidden rows: ambiguous. */
	tiny_config(&cfg, 1);
	text = sg_line(0, 0, 5, 0, 0, NULL, NULL,
		       ", \"prompt_tokens\": 4, \"completion_tokens\": 2");
	ck_assert_msg(import_text(text, &o, &cfg, &c, &err, "s.jsonl") == 0, "%s", err.msg);
	ck_assert_uint_eq(c.n, 1);
	check_ids(&c.v[0], 0, 5);
	collector_free(&c);
	free(text);
	/* Without the counts the hidden-layer shape (the engines') wins. */
	text = sg_line(0, 0, 4, 1, 0, NULL, NULL, NULL);
	ck_assert_int_eq(import_text(text, &o, &cfg, &c, &err, "s.jsonl"), 0);
	check_ids(&c.v[0], 0, 4);
	collector_free(&c);
	free(text);
}
END_TEST

/* ---- megatron ------------------------------------------------------------- */

/* One router-trace record: layer `layer` of sequence s (tokens rows). */
static char *mg_line(unsigned step, unsigned layer, unsigned moe_layer, unsigned rank,
		     unsigned s, unsigned tokens, const char *extra)
{
	char *line = NULL, *ti = strdup("[");
	unsigned t, k;

	for (t = 0; t < tokens; t++) {
		char cell[64];

		snprintf(cell, sizeof(cell), "%s[", t ? ", " : "");
		ti = cat(ti, strdup(cell));
		for (k = 0; k < K; k++) {
			snprintf(cell, sizeof(cell), "%s%u", k ? ", " : "",
				 id_at(s, t, moe_layer, k));
			ti = cat(ti, strdup(cell));
		}
		ti = cat(ti, strdup("]"));
	}
	ti = cat(ti, strdup("]"));
	ck_assert_int_ge(asprintf(&line,
				  "{\"step\": %u, \"stage\": \"pre_dispatch\", \"block\": \"decoder\", "
				  "\"layer\": %u, \"rank\": %u, \"num_tokens\": %u, \"topk\": %u, "
				  "\"top_indices\": %s%s}\n",
				  step, layer, rank, tokens, K, ti, extra ? extra : ""), 0);
	free(ti);
	return line;
}

START_TEST(test_megatron_assembly)
{
	struct rlb_import_opts o = opts_of(RLB_IMPORT_MEGATRON);
	struct rlb_err err = { 0, "" };
	struct collector c = { 0 };
	struct rlb_config cfg;
	char *text = NULL;
	unsigned l, v, off;

	for (v = 0; v < 4; v++) {
		/* no dense layer or one; `layer` counted from 0, or from 1 (v >= 2) */
		off = (v & 1) + (v >> 1);
		tiny_config(&cfg, (int)(v & 1));
		text = NULL;
		/*
		 * Step 0: ranks 0 and 1 interleaved layer by layer (seqs 0, 1),
		 * then rank 0's second forward pass (seq 2); an MTP record is
		 * skipped.  Step 1: rank 1 (seq 3).  With dense layers the
		 * `layer` field counts decoder layers.
		 */
		for (l = 0; l < L; l++) {
			text = cat(text, mg_line(0, l + off, l, 0, 0, 3, NULL));
			text = cat(text, mg_line(0, l + off, l, 1, 1, 2, NULL));
		}
		text = cat(text, mg_line(0, 0, 0, 0, 9, 5, ", \"mtp_idx\": 0"));
		for (l = 0; l < L; l++)
			text = cat(text, mg_line(0, l + off, l, 0, 2, 4, NULL));
		for (l = 0; l < L; l++)
			text = cat(text, mg_line(1, l + off, l, 1, 3, 1, NULL));
		ck_assert_msg(import_text(text, &o, &cfg, &c, &err, "m.jsonl") == 0, "%s", err.msg);
		ck_assert_uint_eq(c.n, 4);
		check_ids(&c.v[0], 0, 3);
		check_ids(&c.v[1], 1, 2);
		check_ids(&c.v[2], 2, 4);
		check_ids(&c.v[3], 3, 1);
		ck_assert_uint_eq(c.v[0].s.step, 0);
		ck_assert_uint_eq(c.v[2].s.step, 0);
		ck_assert_uint_eq(c.v[2].s.group, 2);
		ck_assert_uint_eq(c.v[3].s.step, 1);
		ck_assert_uint_eq(c.v[3].s.group, 0);
		collector_free(&c);
		free(text);
	}
}
END_TEST

START_TEST(test_megatron_directory_merge)
{
	struct rlb_import_opts o = opts_of(RLB_IMPORT_MEGATRON);
	struct rlb_err err = { 0, "" };
	struct collector c = { 0 };
	struct rlb_config cfg;
	char *dir = tmp_dir(), *p0, *p1, *t0 = NULL, *t1 = NULL;
	unsigned l, st;

	tiny_config(&cfg, 0);
	/* Per-rank files, two steps each: merged by step. */
	for (st = 0; st < 2; st++) {
		for (l = 0; l < L; l++) {
			t0 = cat(t0, mg_line(st, l, l, 0, st * 2, 2, NULL));
			t1 = cat(t1, mg_line(st, l, l, 1, st * 2 + 1, 3, NULL));
		}
	}
	p0 = path_in(dir, "router_trace_rank0.jsonl");
	p1 = path_in(dir, "router_trace_rank1.jsonl");
	write_file(p0, t0, strlen(t0));
	write_file(p1, t1, strlen(t1));
	ck_assert_msg(rlb_import_to_sink(&o, dir, &cfg, collect, &c, NULL, NULL, &err) == 0,
		      "%s", err.msg);
	ck_assert_uint_eq(c.n, 4);
	check_ids(&c.v[0], 0, 2);
	check_ids(&c.v[1], 1, 3);
	check_ids(&c.v[2], 2, 2);
	check_ids(&c.v[3], 3, 3);
	ck_assert_uint_eq(c.v[1].s.step, 0);
	ck_assert_uint_eq(c.v[2].s.step, 1);
	collector_free(&c);
	/* The same records concatenated: steps go back. */
	t0 = cat(t0, t1);
	t1 = NULL;
	ck_assert_int_eq(import_text(t0, &o, &cfg, &c, &err, "m.jsonl"), RLB_EINVAL);
	ck_assert_str_eq(err.msg, "m.jsonl:9: step: 0 comes after step 1 (steps must not decrease)");
	collector_free(&c);
	unlink(p0);
	unlink(p1);
	rmdir(dir);
	free(p0);
	free(p1);
	free(t0);
	free(dir);
}
END_TEST

/* The router firing again in activation recompute: repeats are dropped. */
static char *mg_pass(char *text, unsigned step, unsigned rank, unsigned s,
		     unsigned tokens, unsigned from, unsigned to, int down)
{
	unsigned i;

	for (i = from; i < to; i++) {
		unsigned l = down ? to - 1 - (i - from) : i;

		text = cat(text, mg_line(step, l, l, rank, s, tokens, NULL));
	}
	return text;
}

START_TEST(test_megatron_recompute)
{
	struct rlb_import_opts o = opts_of(RLB_IMPORT_MEGATRON);
	struct rlb_import_stats st = { .records = 0 };
	struct rlb_err err = { 0, "" };
	struct collector c = { 0 };
	struct rlb_config cfg;
	char *text = NULL;

	tiny_config(&cfg, 0);
	o.stats = &st;
	/*
	 * Step 0, rank 0: micro-batch A, then its backward recomputing every
	 * layer in reverse; micro-batch B, recomputing layers 0 and 1 only;
	 * rank 1 routing exactly as A did (another key: kept).  Step 1:
	 * A's routing again (a new step: kept), then its recompute.
	 */
	text = mg_pass(text, 0, 0, 0, 3, 0, L, 0);
	text = mg_pass(text, 0, 0, 0, 3, 0, L, 1);
	text = mg_pass(text, 0, 0, 1, 2, 0, L, 0);
	text = mg_pass(text, 0, 0, 1, 2, 0, 2, 1);
	text = mg_pass(text, 0, 1, 0, 3, 0, L, 0);
	text = mg_pass(text, 1, 0, 0, 3, 0, L, 0);
	text = mg_pass(text, 1, 0, 0, 3, 0, L, 1);
	ck_assert_msg(import_text(text, &o, &cfg, &c, &err, "m.jsonl") == 0, "%s", err.msg);
	ck_assert_uint_eq(c.n, 4);
	check_ids(&c.v[0], 0, 3);
	check_ids(&c.v[1], 1, 2);
	check_ids(&c.v[2], 0, 3);
	check_ids(&c.v[3], 0, 3);
	ck_assert_uint_eq(c.v[2].s.step, 0);
	ck_assert_uint_eq(c.v[3].s.step, 1);
	ck_assert_uint_eq(st.records, 6 * L + 2);
	ck_assert_uint_eq(st.recomputed, 2 * L + 2);
	ck_assert_uint_eq(st.sequences, 4);
	ck_assert_uint_eq(st.tokens, 3 + 2 + 3 + 3);
	collector_free(&c);
	free(text);

	/* Kept on request: the whole recompute is a second sequence. */
	text = mg_pass(NULL, 0, 0, 0, 3, 0, L, 0);
	text = mg_pass(text, 0, 0, 0, 3, 0, L, 1);
	o.keep_repeats = 1;
	ck_assert_msg(import_text(text, &o, &cfg, &c, &err, "m.jsonl") == 0, "%s", err.msg);
	ck_assert_uint_eq(c.n, 2);
	ck_assert_uint_eq(st.recomputed, 0);
	collector_free(&c);
	o.keep_repeats = 0;

	/* A layer repeated a second time, or other ids, are no recompute. */
	text = cat(text, mg_line(0, 0, 0, 0, 0, 3, NULL));
	ck_assert_int_eq(import_text(text, &o, &cfg, &c, &err, "m.jsonl"), RLB_EMISMATCH);
	ck_assert_str_eq(err.msg, "m.jsonl: sequence of step 0, rank 0 (stage \"pre_dispatch\", "
			 "block \"decoder\") lacks MoE layers 1, 2, 3 at the end of the input");
	collector_free(&c);
	free(text);
	text = mg_pass(NULL, 0, 0, 0, 3, 0, L, 0);
	text = mg_pass(text, 0, 0, 5, 3, 0, 1, 0);
	ck_assert_int_eq(import_text(text, &o, &cfg, &c, &err, "m.jsonl"), RLB_EMISMATCH);
	ck_assert_str_eq(err.msg, "m.jsonl: sequence of step 0, rank 0 (stage \"pre_dispatch\", "
			 "block \"decoder\") lacks MoE layers 1, 2, 3 at the end of the input");
	collector_free(&c);
	free(text);
}
END_TEST

START_TEST(test_megatron_errors)
{
	struct rlb_import_opts o = opts_of(RLB_IMPORT_MEGATRON);
	struct rlb_err err = { 0, "" };
	struct collector c = { 0 };
	struct rlb_config cfg;
	char *text;

	tiny_config(&cfg, 0);
	/* A missing layer, seen when the layer repeats / the step ends / the input ends. */
	text = cat(cat(mg_line(0, 0, 0, 0, 0, 2, NULL), mg_line(0, 1, 1, 0, 0, 2, NULL)),
		   mg_line(0, 0, 0, 0, 0, 2, NULL));
	ck_assert_int_eq(import_text(text, &o, &cfg, &c, &err, "m.jsonl"), RLB_EMISMATCH);
	ck_assert_str_eq(err.msg, "m.jsonl:3: sequence of step 0, rank 0 (stage \"pre_dispatch\", "
			 "block \"decoder\") lacks MoE layers 2, 3 when its layer 0 repeats");
	free(text);
	text = cat(mg_line(0, 0, 0, 0, 0, 2, NULL), mg_line(1, 0, 0, 0, 0, 2, NULL));
	ck_assert_int_eq(import_text(text, &o, &cfg, &c, &err, "m.jsonl"), RLB_EMISMATCH);
	ck_assert_str_eq(err.msg, "m.jsonl:2: sequence of step 0, rank 0 (stage \"pre_dispatch\", "
			 "block \"decoder\") lacks MoE layers 1, 2, 3 when step 1 begins");
	free(text);
	text = cat(cat(mg_line(0, 0, 0, 0, 0, 2, NULL), mg_line(0, 1, 1, 0, 0, 2, NULL)),
		   mg_line(0, 3, 3, 0, 0, 2, NULL));
	ck_assert_int_eq(import_text(text, &o, &cfg, &c, &err, "m.jsonl"), RLB_EMISMATCH);
	ck_assert_str_eq(err.msg, "m.jsonl: sequence of step 0, rank 0 (stage \"pre_dispatch\", "
			 "block \"decoder\") lacks MoE layer 2 at the end of the input");
	free(text);
	/* num_tokens differing between layers; num_tokens vs top_indices; topk; ids. */
	text = cat(mg_line(0, 0, 0, 0, 0, 2, NULL), mg_line(0, 1, 1, 0, 0, 3, NULL));
	ck_assert_int_eq(import_text(text, &o, &cfg, &c, &err, "m.jsonl"), RLB_EMISMATCH);
	ck_assert_str_eq(err.msg, "m.jsonl:2: num_tokens: 3, earlier layers of this sequence have 2");
	free(text);
	ck_assert_int_eq(import_text("{\"step\": 0, \"layer\": 0, \"num_tokens\": 2, \"topk\": 2, "
				     "\"top_indices\": [[1, 2]]}", &o, &cfg, &c, &err, "m.jsonl"),
			 RLB_EMISMATCH);
	ck_assert_str_eq(err.msg, "m.jsonl:1: top_indices: 1 tokens, num_tokens is 2");
	ck_assert_int_eq(import_text("{\"step\": 0, \"layer\": 0, \"num_tokens\": 1, \"topk\": 3, "
				     "\"top_indices\": [[1, 2, 3]]}", &o, &cfg, &c, &err, "m.jsonl"),
			 RLB_EMISMATCH);
	ck_assert_str_eq(err.msg, "m.jsonl:1: topk: 3, the config has 2");
	ck_assert_int_eq(import_text("{\"step\": 0, \"layer\": 0, \"num_tokens\": 2, \"topk\": 2, "
				     "\"top_indices\": [[1, 2], [3, 16]]}", &o, &cfg, &c, &err,
				     "m.jsonl"), RLB_ERANGE);
	ck_assert_str_eq(err.msg, "m.jsonl:1: top_indices[1][1]: value 16 is not an expert id in [0, 16)");
	ck_assert_int_eq(import_text("{\"step\": 0, \"layer\": 0, \"num_tokens\": 1, \"topk\": 2, "
				     "\"top_indices\": [[1]]}", &o, &cfg, &c, &err, "m.jsonl"),
			 RLB_EMISMATCH);
	ck_assert_str_eq(err.msg, "m.jsonl:1: top_indices[0]: expected an array of topk 2 ids");
	ck_assert_int_eq(import_text("{\"layer\": 0}", &o, &cfg, &c, &err, "m.jsonl"), RLB_EPARSE);
	ck_assert_str_eq(err.msg, "m.jsonl:1: step: missing");
	/* The first record sets the numbering: from 0, or from 1. */
	text = cat(mg_line(0, 0, 0, 0, 0, 2, NULL), mg_line(0, 4, 3, 0, 0, 2, NULL));
	ck_assert_int_eq(import_text(text, &o, &cfg, &c, &err, "m.jsonl"), RLB_ERANGE);
	ck_assert_str_eq(err.msg, "m.jsonl:2: layer: 4 is outside the MoE layers [0, 4)");
	free(text);
	text = cat(mg_line(0, 1, 0, 0, 0, 2, NULL), mg_line(0, 0, 3, 0, 0, 2, NULL));
	ck_assert_int_eq(import_text(text, &o, &cfg, &c, &err, "m.jsonl"), RLB_ERANGE);
	ck_assert_str_eq(err.msg, "m.jsonl:2: layer: 0 is outside the MoE layers [1, 5)");
	free(text);
	ck_assert_int_eq(import_text("{\"step\": 0, \"layer\": 2, \"num_tokens\": 0, \"topk\": 2, "
				     "\"top_indices\": []}", &o, &cfg, &c, &err, "m.jsonl"), RLB_EINVAL);
	ck_assert_str_eq(err.msg, "m.jsonl:1: layer: 2 in the first record is neither 0 (MoE-layer "
			 "numbering), 0 (decoder-layer numbering after 0 dense layers) nor 1 "
			 "(the same from 1)");
	tiny_config(&cfg, 2);
	ck_assert_int_eq(import_text("{\"step\": 0, \"layer\": 1, \"num_tokens\": 0, \"topk\": 2, "
				     "\"top_indices\": []}", &o, &cfg, &c, &err, "m.jsonl"), RLB_EINVAL);
	ck_assert_str_eq(err.msg, "m.jsonl:1: layer: 1 in the first record is neither 0 (MoE-layer "
			 "numbering), 2 (decoder-layer numbering after 2 dense layers) nor 3 "
			 "(the same from 1)");
	o.gates = 1;
	ck_assert_int_eq(import_text("{}", &o, &cfg, &c, &err, "m.jsonl"), RLB_EUNSUPPORTED);
	ck_assert_str_eq(err.msg, "megatron router traces carry no gate weights (drop --gates)");
	collector_free(&c);
}
END_TEST

/* ---- jsonl --------------------------------------------------------------- */

/* A jsonl record of sequence s; `dense` leading layers of `dense_row`. */
static char *jl_line(unsigned s, unsigned tokens, unsigned dense, const char *dense_row,
		     int gates, const char *top)
{
	char *ex = strdup("["), *ga = strdup("["), *line, cell[64];
	unsigned t, l, k;

	for (t = 0; t < tokens; t++) {
		ex = cat(ex, strdup(t ? ", [" : "["));
		ga = cat(ga, strdup(t ? ", [" : "["));
		for (l = 0; l < in_layers(dense); l++) {
			int m = moe_at(dense, l);

			if (l)
				ex = cat(ex, strdup(", ")), ga = cat(ga, strdup(", "));
			if (m < 0) {
				ex = cat(ex, strdup(dense_row));
				ga = cat(ga, strdup("[]"));
				continue;
			}
			ex = cat(ex, strdup("["));
			ga = cat(ga, strdup("["));
			for (k = 0; k < K; k++) {
				snprintf(cell, sizeof(cell), "%s%u", k ? ", " : "",
					 id_at(s, t, (unsigned)m, k));
				ex = cat(ex, strdup(cell));
				snprintf(cell, sizeof(cell), "%s%.9g", k ? ", " : "",
					 (double)gate_at(s, t, (unsigned)m, k));
				ga = cat(ga, strdup(cell));
			}
			ex = cat(ex, strdup("]"));
			ga = cat(ga, strdup("]"));
		}
		ex = cat(ex, strdup("]"));
		ga = cat(ga, strdup("]"));
	}
	ex = cat(ex, strdup("]"));
	ga = cat(ga, strdup("]"));
	ck_assert_int_ge(asprintf(&line, "{%s\"experts\": %s%s%s}\n", top ? top : "", ex,
				  gates ? ", \"gates\": " : "", gates ? ga : ""), 0);
	free(ex);
	free(ga);
	return line;
}

START_TEST(test_jsonl_records)
{
	struct rlb_import_opts o = opts_of(RLB_IMPORT_JSONL);
	struct rlb_err err = { 0, "" };
	struct collector c = { 0 };
	struct rlb_config cfg;
	char *text = NULL;
	unsigned t, l, k;

	tiny_config(&cfg, 2);
	text = cat(text, jl_line(0, 3, 0, NULL, 1, "\"step\": 1, \"group\": 4, \"sample\": 2, "));
	text = cat(text, jl_line(1, 2, 2, "[-1, -1]", 1, "\"step\": 1, \"group\": 4, "));
	text = cat(text, jl_line(2, 4, 2, "[]", 1, "\"step\": 2, "));
	text = cat(text, strdup("{\"step\": 2, \"experts\": [], \"gates\": []}\n"));
	o.gates = 1;
	ck_assert_msg(import_text(text, &o, &cfg, &c, &err, "j.jsonl") == 0, "%s", err.msg);
	ck_assert_uint_eq(c.n, 3);
	check_ids(&c.v[0], 0, 3);
	check_ids(&c.v[1], 1, 2);
	check_ids(&c.v[2], 2, 4);
	ck_assert_uint_eq(c.v[0].s.step, 1);
	ck_assert_uint_eq(c.v[0].s.group, 4);
	ck_assert_uint_eq(c.v[0].s.sample, 2);
	ck_assert_uint_eq(c.v[1].s.group, 4);
	ck_assert_uint_eq(c.v[1].s.sample, 3);
	ck_assert_uint_eq(c.v[2].s.step, 2);
	ck_assert_uint_eq(c.v[2].s.group, 0);
	for (l = 0; l < L; l++)
		for (t = 0; t < 4; t++)
			for (k = 0; k < K; k++)
				ck_assert(c.v[2].gates[(l * 4 + t) * K + k] == gate_at(2, t, l, k));
	collector_free(&c);
	free(text);
}
END_TEST

/*
 * Interleaved MoE layers (model.moe_layer_period): every format's rows of
 * all hidden layers keep the MoE ones wherever they are, the dense rows
 * holding -1 that would fail if read; MoE-only rows still import.
 */
START_TEST(test_interleaved_layers)
{
	struct rlb_import_opts o;
	struct rlb_err err = { 0, "" };
	struct collector c = { 0 };
	struct rlb_config cfg;
	char *dir = tmp_dir(), *p, *text = NULL;
	unsigned l, v;
	uint8_t *buf;
	size_t n;

	/* 1 dense layer, then blocks [dense, MoE]: MoE layers 2, 4, 6, 8 of 9 */
	period = 2;
	offset = 1;
	tiny_config(&cfg, 1);

	o = opts_of(RLB_IMPORT_SGLANG);
	text = cat(text, sg_line(0, 0, 3, 1, -1, "int32", NULL, NULL));
	period = 1;
	offset = 0;
	text = cat(text, sg_line(1, 0, 2, 0, 0, "uint8", NULL, NULL));
	period = 2;
	offset = 1;
	ck_assert_msg(import_text(text, &o, &cfg, &c, &err, "s.jsonl") == 0, "%s", err.msg);
	ck_assert_uint_eq(c.n, 2);
	check_ids(&c.v[0], 0, 3);
	check_ids(&c.v[1], 1, 2);
	collector_free(&c);
	free(text);
	/* a bad gate weight is named at its input layer: MoE layer 2 is layer 6 */
	o.gates = 1;
	buf = gate_bytes(0, 3, 1, &n);
	rlb_put_u32(buf + 4 * ((1 * 9 + 6) * K + 1), 0xc0400000u);
	p = b64(buf, n);
	free(buf);
	ck_assert_int_ge(asprintf(&text, ", \"routed_experts_gates\": \"%s\"", p), 0);
	free(p);
	p = text;
	text = sg_line(0, 0, 3, 1, -1, "int32", NULL, p);
	free(p);
	ck_assert_int_eq(import_text(text, &o, &cfg, &c, &err, "s.jsonl"), RLB_ERANGE);
	ck_assert_str_eq(err.msg, "s.jsonl:1: meta_info.routed_experts_gates: value -3 at row 1, "
			 "layer 6, column 1 is not a finite non-negative float32");
	collector_free(&c);
	free(text);

	o = opts_of(RLB_IMPORT_VLLM);
	buf = npy_seq(1, "<i4", 2, 5, 1, -1, &n);
	p = path_in(dir, "seq.npy");
	write_file(p, buf, n);
	ck_assert_msg(rlb_import_to_sink(&o, p, &cfg, collect, &c, NULL, NULL, &err) == 0,
		      "%s", err.msg);
	ck_assert_uint_eq(c.n, 1);
	check_ids(&c.v[0], 2, 5);
	collector_free(&c);
	unlink(p);
	free(p);
	free(buf);

	o = opts_of(RLB_IMPORT_JSONL);
	text = jl_line(3, 4, 1, "[-1, -1]", 0, NULL);
	ck_assert_msg(import_text(text, &o, &cfg, &c, &err, "j.jsonl") == 0, "%s", err.msg);
	check_ids(&c.v[0], 3, 4);
	collector_free(&c);
	free(text);
	/* the count of a model without the period is refused, naming both */
	period = 1;
	text = jl_line(3, 4, 1, "[-1, -1]", 0, NULL);
	period = 2;
	ck_assert_int_eq(import_text(text, &o, &cfg, &c, &err, "j.jsonl"), RLB_EMISMATCH);
	ck_assert_str_eq(err.msg, "j.jsonl:1: experts[0]: 5 layers, the config has 9 "
			 "(5 dense + 4 MoE) or 4 MoE layers");
	collector_free(&c);
	free(text);

	/*
	 * Megatron: decoder layers from 0 (2, 4, 6, 8) or 1 (3, 5, 7, 9), or
	 * MoE layers (0-3); then blocks of 3 from layer 0 (0, 3, 6, 9), where
	 * decoder and MoE numbering both start at 0 and the next layer decides.
	 */
	o = opts_of(RLB_IMPORT_MEGATRON);
	for (v = 0; v < 5; v++) {
		unsigned first = v < 3 ? 2 + v % 2 : 0, stride = v < 2 || v == 3 ? 2 : 1;

		if (v >= 3) {
			period = 3;
			offset = 0;
			tiny_config(&cfg, 0);
			stride = v == 3 ? 3 : 1;
		} else if (v == 2) {
			first = 0;
		}
		text = NULL;
		for (l = 0; l < L; l++)
			text = cat(text, mg_line(0, first + l * stride, l, 0, 5, 3, NULL));
		ck_assert_msg(import_text(text, &o, &cfg, &c, &err, "m.jsonl") == 0,
			      "numbering %u: %s", v, err.msg);
		ck_assert_uint_eq(c.n, 1);
		check_ids(&c.v[0], 5, 3);
		collector_free(&c);
		free(text);
	}
	/* a dense layer's record is refused */
	period = 2;
	offset = 1;
	tiny_config(&cfg, 1);
	text = cat(mg_line(0, 2, 0, 0, 5, 3, NULL), mg_line(0, 3, 1, 0, 5, 3, NULL));
	ck_assert_int_eq(import_text(text, &o, &cfg, &c, &err, "m.jsonl"), RLB_ERANGE);
	ck_assert_str_eq(err.msg, "m.jsonl:2: layer: 3 is not one of the MoE layers 2, 4, "
			 "... 8 (model.moe_layer_period 2)");
	collector_free(&c);
	free(text);

	period = 1;
	offset = 0;
	rmdir(dir);
	free(dir);
}
END_TEST

static const struct {
	const char *value, *msg;
} bad_gates[] = {
	{ "1e39", "j.jsonl:1: gates[0][3][1]: value 1e+39 is not a finite non-negative float32" },
	{ "3.40282357e38",
	  "j.jsonl:1: gates[0][3][1]: value 3.40282357e+38 is not a finite non-negative float32" },
	{ "-3", "j.jsonl:1: gates[0][3][1]: value -3 is not a finite non-negative float32" },
	{ "-1e-30", "j.jsonl:1: gates[0][3][1]: value -1e-30 is not a finite non-negative float32" },
};

START_TEST(test_jsonl_errors)
{
	static const struct { const char *line, *msg; int code; } v[] = {
		{ "{\"step\": 0}", "j.jsonl:1: experts: missing", RLB_EPARSE },
		{ "{\"experts\": 3}", "j.jsonl:1: experts: expected an array of tokens", RLB_EPARSE },
		{ "{\"experts\": [[[1, 2], [1, 2], [1, 2]]]}",
		  "j.jsonl:1: experts[0]: 3 layers, the config has 4 MoE layers", RLB_EMISMATCH },
		{ "{\"experts\": [[[1, 2], [1, 2], [1, 2], [1, 2]], [[1, 2]]]}",
		  "j.jsonl:1: experts[1]: 1 layers, expected 4 as in experts[0]", RLB_EMISMATCH },
		{ "{\"experts\": [[[1, 2], [1, 2], [1, 2, 3], [1, 2]]]}",
		  "j.jsonl:1: experts[0][2]: 3 values, expected topk 2", RLB_EMISMATCH },
		{ "{\"experts\": [[[1, 2], [1, 2], [1, 2], [1, -1]]]}",
		  "j.jsonl:1: experts[0][3][1]: value -1 is not an expert id in [0, 16)", RLB_ERANGE },
		{ "{\"experts\": [[[1, 2], [1, 2], [1, 2], [1, 16]]]}",
		  "j.jsonl:1: experts[0][3][1]: value 16 is not an expert id in [0, 16)", RLB_ERANGE },
		{ "{\"experts\": [[[1, 2], [1, 2], [1, 2], [1, 2.5]]]}",
		  "j.jsonl:1: experts[0][3][1]: expected an integer", RLB_EPARSE },
		{ "{\"group\": \"a\", \"experts\": []}",
		  "j.jsonl:1: group: expected an integer in [0, 4294967295]", RLB_EPARSE },
		{ "{\"experts\": [], \"experts\": []}",
		  "j.jsonl:1:25: invalid JSON: duplicate object key near '\"experts\"'", RLB_EPARSE },
		{ "[]", "j.jsonl:1: expected a JSON object", RLB_EPARSE },
	};
	struct rlb_import_opts o = opts_of(RLB_IMPORT_JSONL);
	struct rlb_err err = { 0, "" };
	struct collector c = { 0 };
	struct rlb_config cfg;
	size_t i;

	tiny_config(&cfg, 0);
	for (i = 0; i < sizeof(v) / sizeof(v[0]); i++) {
		ck_assert_int_eq(import_text(v[i].line, &o, &cfg, &c, &err, "j.jsonl"), v[i].code);
		ck_assert_str_eq(err.msg, v[i].msg);
		collector_free(&c);
	}
	/* a NUL byte is not JSON text, wherever it stands */
	{
		static const char a[] = "{\"step\": 0\0, \"experts\": []}\n",
				  b[] = "{\"experts\": []}\n\0\n";

		ck_assert_int_eq(import_bytes(a, sizeof(a) - 1, &o, &cfg, &c, &err,
					      "j.jsonl"), RLB_EPARSE);
		ck_assert_str_eq(err.msg, "j.jsonl:1:11: a NUL byte at byte offset 10, expected JSON text");
		collector_free(&c);
		ck_assert_int_eq(import_bytes(b, sizeof(b) - 1, &o, &cfg, &c, &err,
					      "j.jsonl"), RLB_EPARSE);
		ck_assert_str_eq(err.msg, "j.jsonl:2:1: a NUL byte at byte offset 16, expected JSON text");
		collector_free(&c);
	}
	/* an endless binary stream: refused at its first chunk, not read on to a newline */
	ck_assert_int_eq(rlb_import_to_sink(&o, "/dev/zero", &cfg, collect, &c, NULL, NULL, &err),
			 RLB_EPARSE);
	ck_assert_str_eq(err.msg, "/dev/zero:1:1: a NUL byte at byte offset 0, expected JSON text");
	collector_free(&c);
	/* A torch.save file given as JSON lines (slime's debug rollout data). */
	{
		static const char zip[] = "PK\x03\x04\x14\0\0\0\x08\0archive/data.pkl",
				  pkl[] = "\x80\x02}q\0(X\x0a\0\0\0rollout_id";
		struct rlb_import_opts so = opts_of(RLB_IMPORT_SGLANG);

		ck_assert_int_eq(import_bytes(zip, sizeof(zip) - 1, &so, &cfg, &c, &err,
					      "rollout_1.pt"), RLB_EPARSE);
		ck_assert_str_eq(err.msg, "rollout_1.pt:1:6: a NUL byte at byte offset 5, "
				 "expected JSON text (a zip archive, such as a torch.save or "
				 "numpy.savez file: docs/jsonl-format.md says how to convert one)");
		ck_assert_int_eq(import_bytes(pkl, sizeof(pkl) - 1, &o, &cfg, &c, &err,
					      "rollout_1.pt"), RLB_EPARSE);
		ck_assert_str_eq(err.msg, "rollout_1.pt:1:5: a NUL byte at byte offset 4, "
				 "expected JSON text (a Python pickle, such as a legacy torch.save "
				 "file: docs/jsonl-format.md says how to convert one)");
		collector_free(&c);
	}
	o.gates = 1;
	ck_assert_int_eq(import_text("{\"experts\": [[[1, 2], [1, 2], [1, 2], [1, 2]]], "
				     "\"gates\": [[[1, 2], [1, 2], [1, 2], [1, \"x\"]]]}",
				     &o, &cfg, &c, &err, "j.jsonl"), RLB_EPARSE);
	ck_assert_str_eq(err.msg, "j.jsonl:1: gates[0][3][1]: expected a number");
	ck_assert_int_eq(import_text("{\"experts\": []}", &o, &cfg, &c, &err, "j.jsonl"),
			 RLB_EPARSE);
	ck_assert_str_eq(err.msg, "j.jsonl:1: gates: missing (--gates needs gate weights in every record)");
	collector_free(&c);
	/* Gate weights must be finite float32 values >= 0. */
	for (i = 0; i < sizeof(bad_gates) / sizeof(bad_gates[0]); i++) {
		char *line;

		ck_assert_int_ge(asprintf(&line, "{\"experts\": [[[1, 2], [1, 2], [1, 2], [1, 2]]], "
					  "\"gates\": [[[1, 2], [1, 2], [1, 2], [1, %s]]]}",
					  bad_gates[i].value), 0);
		ck_assert_int_eq(import_text(line, &o, &cfg, &c, &err, "j.jsonl"), RLB_ERANGE);
		ck_assert_str_eq(err.msg, bad_gates[i].msg);
		free(line);
		collector_free(&c);
	}
	/* 0, -0, the largest float32 (3.4028235e38 rounds down to it) and subnormals */
	ck_assert_msg(import_text("{\"experts\": [[[1, 2], [1, 2], [1, 2], [1, 2]]], "
				  "\"gates\": [[[0, -0.0], [3.4028235e38, 1e-45], [1, 2], [1, 2]]]}",
				  &o, &cfg, &c, &err, "j.jsonl") == 0, "%s", err.msg);
	ck_assert_uint_eq(c.n, 1);
	ck_assert(c.v[0].gates[0] == 0.0f);
	ck_assert(c.v[0].gates[1] == 0.0f);
	ck_assert(c.v[0].gates[2] == FLT_MAX);
	ck_assert(c.v[0].gates[3] > 0.0f);
	collector_free(&c);
}
END_TEST

/* Assigned group and sample ids past 2^32-1 are errors, never a wrap to 0. */
START_TEST(test_id_overflow)
{
	struct rlb_import_opts o = opts_of(RLB_IMPORT_JSONL);
	struct rlb_err err = { 0, "" };
	struct collector c = { 0 };
	struct rlb_config cfg;
	char *text = NULL;
	unsigned i;

	tiny_config(&cfg, 0);
	for (i = 0; i < 6; i++)
		text = cat(text, jl_line(i, 1, 0, NULL, 0, NULL));
	/* --group 4294967295 --group-size 4: room for 4 sequences in a step */
	o.group = UINT32_MAX;
	o.group_size = 4;
	ck_assert_int_eq(import_text(text, &o, &cfg, &c, &err, "j.jsonl"), RLB_ERANGE);
	ck_assert_str_eq(err.msg, "j.jsonl:5: group: sequence 4 of step 0 gets group 4294967296 "
			 "(--group 4294967295 --group-size 4), above 4294967295");
	ck_assert_uint_eq(c.n, 4);
	ck_assert_uint_eq(c.v[3].s.group, UINT32_MAX);
	ck_assert_uint_eq(c.v[3].s.sample, 3);
	collector_free(&c);
	/* one group lower, the last two get the top id */
	o.group = UINT32_MAX - 1;
	ck_assert_msg(import_text(text, &o, &cfg, &c, &err, "j.jsonl") == 0, "%s", err.msg);
	ck_assert_uint_eq(c.n, 6);
	ck_assert_uint_eq(c.v[5].s.group, UINT32_MAX);
	ck_assert_uint_eq(c.v[5].s.sample, 1);
	collector_free(&c);
	free(text);
	/* each step starts counting again */
	o.group = UINT32_MAX;
	o.group_size = 2;
	text = NULL;
	for (i = 0; i < 4; i++) {
		char top[32];

		snprintf(top, sizeof(top), "\"step\": %u, ", i / 2);
		text = cat(text, jl_line(i, 1, 0, NULL, 0, top));
	}
	ck_assert_msg(import_text(text, &o, &cfg, &c, &err, "j.jsonl") == 0, "%s", err.msg);
	ck_assert_uint_eq(c.n, 4);
	ck_assert_uint_eq(c.v[3].s.step, 1);
	ck_assert_uint_eq(c.v[3].s.group, UINT32_MAX);
	collector_free(&c);
	free(text);
	/* the sample after the input's sample 4294967295 of the same group */
	o = opts_of(RLB_IMPORT_JSONL);
	text = cat(jl_line(0, 1, 0, NULL, 0, "\"group\": 7, \"sample\": 4294967295, "),
		   jl_line(1, 1, 0, NULL, 0, "\"group\": 7, "));
	ck_assert_int_eq(import_text(text, &o, &cfg, &c, &err, "j.jsonl"), RLB_ERANGE);
	ck_assert_str_eq(err.msg, "j.jsonl:2: sample: the sequence after sample 4294967295 "
			 "of group 7 gets sample 4294967296, above 4294967295");
	ck_assert_uint_eq(c.n, 1);
	collector_free(&c);
	free(text);
}
END_TEST

/* ---- corruption ------------------------------------------------------------ */

/* Each byte of TEXT replaced by a few values: the import answers, never crashes. */
static void mutate_all(const char *text, enum rlb_import_format f, int dense)
{
	static const char vals[] = { '0', '9', '"', '[', ']', '{', ',', '-', 'A', '=' };
	struct rlb_import_opts o = opts_of(f);
	struct rlb_err err = { 0, "" };
	struct collector c = { 0 };
	struct rlb_config cfg;
	char *m = strdup(text);
	size_t i, j, n = strlen(text);

	tiny_config(&cfg, dense);
	for (i = 0; i + 1 < n; i++) {
		for (j = 0; j < sizeof(vals); j++) {
			int ret;

			m[i] = vals[j];
			ret = import_text(m, &o, &cfg, &c, &err, "x.jsonl");
			ck_assert(ret <= 0);
			if (ret != 0)
				ck_assert_msg(err.msg[0] != '\0', "no message");
			collector_free(&c);
		}
		m[i] = text[i];
	}
	free(m);
}

START_TEST(test_corrupt_records)
{
	char *t;

	t = cat(sg_line(0, 0, 2, 1, 0, "uint8", "\"step\": 1, ", ", \"routed_experts_start_len\": 0"),
		sg_line(0, 2, 1, 1, 0, "uint8", "\"step\": 1, ", ", \"routed_experts_start_len\": 2"));
	mutate_all(t, RLB_IMPORT_SGLANG, 1);
	free(t);
	t = cat(mg_line(0, 0, 0, 0, 0, 2, NULL), mg_line(0, 1, 1, 0, 0, 2, NULL));
	t = cat(t, cat(mg_line(0, 2, 2, 0, 0, 2, NULL), mg_line(0, 3, 3, 0, 0, 2, NULL)));
	mutate_all(t, RLB_IMPORT_MEGATRON, 0);
	free(t);
	t = jl_line(0, 2, 1, "[0, 0]", 0, "\"step\": 1, ");
	mutate_all(t, RLB_IMPORT_JSONL, 1);
	free(t);
}
END_TEST

/* ---- stdin, config checks, writer round trip ----------------------------- */

START_TEST(test_stdin_and_config)
{
	struct rlb_import_opts o = opts_of(RLB_IMPORT_JSONL);
	struct rlb_err err = { 0, "" };
	struct collector c = { 0 };
	struct rlb_config cfg;
	char *dir = tmp_dir(), *p = path_in(dir, "in.jsonl"), *text;

	tiny_config(&cfg, 0);
	text = cat(jl_line(0, 2, 0, NULL, 0, NULL), jl_line(1, 3, 0, NULL, 0, NULL));
	write_file(p, text, strlen(text));
	ck_assert_ptr_nonnull(freopen(p, "r", stdin));
	ck_assert_int_eq(rlb_import_to_sink(&o, "-", &cfg, collect, &c, NULL, NULL, &err), 0);
	ck_assert_uint_eq(c.n, 2);
	check_ids(&c.v[1], 1, 3);
	collector_free(&c);
	/* vllm cannot read stdin; a directory is no line input. */
	o.format = RLB_IMPORT_VLLM;
	ck_assert_int_eq(rlb_import_to_sink(&o, "-", &cfg, collect, &c, NULL, NULL, &err), RLB_EINVAL);
	ck_assert_str_eq(err.msg, "vllm input is a .npy file or a directory, not stdin");
	o.format = RLB_IMPORT_SGLANG;
	ck_assert_int_eq(rlb_import_to_sink(&o, dir, &cfg, collect, &c, NULL, NULL, &err), RLB_EINVAL);
	ck_assert_msg(strstr(err.msg, "' is a directory"), "%s", err.msg);
	ck_assert_int_eq(rlb_import_to_sink(&o, "/nonexistent/x", &cfg, collect, &c, NULL, NULL,
					    &err), RLB_EIO);
	ck_assert_str_eq(err.msg, "cannot open '/nonexistent/x': No such file or directory");
	/* A config the trace cannot hold. */
	cfg.model.topk = 17;
	ck_assert_int_eq(rlb_import_to_sink(&o, p, &cfg, collect, &c, NULL, NULL, &err), RLB_ECONFIG);
	ck_assert_str_eq(err.msg, "model.topk 17 is outside [1, 16]");
	unlink(p);
	rmdir(dir);
	free(p);
	free(dir);
	free(text);
}
END_TEST

START_TEST(test_writer_round_trip)
{
	struct rlb_import_opts o = opts_of(RLB_IMPORT_JSONL);
	struct rlb_trace_writer *w = NULL;
	struct rlb_trace_reader *r = NULL;
	struct rlb_trace_header h;
	struct rlb_err err = { 0, "" };
	struct rlb_config cfg;
	struct rlb_seq seq;
	char *dir = tmp_dir(), *in = path_in(dir, "in.jsonl"), *out = path_in(dir, "t.rrt");
	char *text = NULL;
	unsigned i, t, l, k;

	tiny_config(&cfg, 1);
	for (i = 0; i < 5; i++) {
		char top[64];

		snprintf(top, sizeof(top), "\"step\": %u, ", i / 2);
		text = cat(text, jl_line(i, 3 + i, 1, "[0, 0]", 1, top));
	}
	write_file(in, text, strlen(text));
	rlb_trace_header_from_config(&h, &cfg);
	h.flags |= RLB_TRACE_F_GATES;
	snprintf(h.source, sizeof(h.source), "jsonl");
	ck_assert_msg(rlb_trace_writer_open(&w, out, &h, NULL, &err) == 0, "%s", err.msg);
	o.gates = 1;
	ck_assert_msg(rlb_import(&o, in, &cfg, w, NULL, NULL, &err) == 0, "%s", err.msg);
	ck_assert_msg(rlb_trace_writer_close(w, &err) == 0, "%s", err.msg);
	ck_assert_msg(rlb_trace_reader_open(&r, out, &err) == 0, "%s", err.msg);
	ck_assert_str_eq(rlb_trace_reader_header(r)->source, "jsonl");
	ck_assert_uint_eq(rlb_trace_reader_header(r)->first_dense_layers, 1);
	for (i = 0; i < 5; i++) {
		ck_assert_int_eq(rlb_trace_reader_next(r, &seq, &err), 1);
		ck_assert_uint_eq(seq.step, i / 2);
		ck_assert_uint_eq(seq.tokens, 3 + i);
		ck_assert_ptr_nonnull(seq.gates);
		for (l = 0; l < L; l++)
			for (t = 0; t < seq.tokens; t++)
				for (k = 0; k < K; k++) {
					size_t at = ((size_t)l * seq.tokens + t) * K + k;

					ck_assert_uint_eq(seq.ids[at], id_at(i, t, l, k));
					ck_assert(seq.gates[at] == gate_at(i, t, l, k));
				}
	}
	ck_assert_int_eq(rlb_trace_reader_next(r, &seq, &err), 0);
	rlb_trace_reader_free(r);
	/* A failing import leaves the writer's sticky error for close. */
	ck_assert_int_eq(rlb_trace_writer_open(&w, out, &h, NULL, &err), 0);
	o.gates = 0;
	ck_assert_int_ne(rlb_import(&o, in, &cfg, w, NULL, NULL, &err), 0);
	rlb_trace_writer_abort(w);
	/* A writer of another shape than the config's is refused first. */
	h.topk = K + 1;
	ck_assert_int_eq(rlb_trace_writer_open(&w, out, &h, NULL, &err), 0);
	ck_assert_int_eq(rlb_import(&o, in, &cfg, w, NULL, NULL, &err), RLB_EMISMATCH);
	ck_assert_str_eq(err.msg, "the config does not match the trace: 'model.topk' is 2 in the config, 3 in the trace");
	rlb_trace_writer_abort(w);
	unlink(in);
	unlink(out);
	rmdir(dir);
	free(in);
	free(out);
	free(dir);
	free(text);
}
END_TEST

Suite *rlb_suite_import(void)
{
	Suite *s = suite_create("import");
	TCase *tc = tcase_create("core");

	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_format_names);
	tcase_add_test(tc, test_base64_good);
	tcase_add_test(tc, test_base64_bad);
	tcase_add_test(tc, test_npy_header_good);
	tcase_add_test(tc, test_npy_header_bad);
	tcase_add_test(tc, test_vllm_dtypes_and_dense);
	tcase_add_test(tc, test_vllm_directory_names);
	tcase_add_test(tc, test_vllm_errors);
	tcase_add_test(tc, test_sglang_dtypes_dense);
	tcase_add_test(tc, test_sglang_ids_and_array);
	tcase_add_test(tc, test_sglang_incremental);
	tcase_add_test(tc, test_sglang_gates);
	tcase_add_test(tc, test_sglang_bad_gates);
	tcase_add_test(tc, test_sglang_errors);
	tcase_add_test(tc, test_sglang_rows_hint);
	tcase_add_test(tc, test_sglang_stream_chunks);
	tcase_add_test(tc, test_sglang_openai);
	tcase_add_test(tc, test_megatron_assembly);
	tcase_add_test(tc, test_interleaved_layers);
	tcase_add_test(tc, test_megatron_directory_merge);
	tcase_add_test(tc, test_megatron_recompute);
	tcase_add_test(tc, test_megatron_errors);
	tcase_add_test(tc, test_jsonl_records);
	tcase_add_test(tc, test_jsonl_errors);
	tcase_add_test(tc, test_id_overflow);
	tcase_add_test(tc, test_corrupt_records);
	tcase_add_test(tc, test_stdin_and_config);
	tcase_add_test(tc, test_writer_round_trip);
	suite_add_tcase(s, tc);
	return s;
}
