/*
 * trace.c - the parts of the trace format (.rrt) shared by the writer and
 * the reader: the header frame, its checks, and the CRC-32C that guards
 * the header and the step index.  Layout: trace_format/SPEC.md.
 */
#include <stdio.h>
#include <string.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#include <immintrin.h>
#endif

#ifdef FUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION
#define ZSTD_STATIC_LINKING_ONLY	/* ZSTD_d_forceIgnoreChecksum */
#endif
#include <zstd.h>

#include "trace_impl.h"
#include "util.h"

void rlb_trace_header_from_config(struct rlb_trace_header *h,
				  const struct rlb_config *cfg)
{
	memset(h, 0, sizeof(*h));
	h->version_major = RLB_TRACE_VERSION_MAJOR;
	h->version_minor = RLB_TRACE_VERSION_MINOR;
	h->experts = cfg->model.experts > 0 ? (uint32_t)cfg->model.experts : 0;
	h->topk = cfg->model.topk > 0 ? (uint32_t)cfg->model.topk : 0;
	h->moe_layers = cfg->model.moe_layers > 0 ? (uint32_t)cfg->model.moe_layers : 0;
	h->first_dense_layers = cfg->model.first_dense_layers > 0 ?
		(uint32_t)cfg->model.first_dense_layers : 0;
	h->moe_layer_period = cfg->model.moe_layer_period > 1 ?
		(uint32_t)cfg->model.moe_layer_period : 1;
	h->moe_layer_offset = cfg->model.moe_layer_offset > 0 ?
		(uint32_t)cfg->model.moe_layer_offset : 0;
	memcpy(h->layer_pattern, cfg->model.layer_pattern, sizeof(h->layer_pattern) - 1);
	h->layer_pattern[sizeof(h->layer_pattern) - 1] = '\0';
	/* Both are RLB_NAME_MAX bytes; keep the copy NUL-terminated. */
	memcpy(h->model, cfg->model.name, sizeof(h->model) - 1);
	h->model[sizeof(h->model) - 1] = '\0';
}

/* Layer I of pattern P for a message: its letter quoted, or "no layer" past the end. */
static const char *pattern_at(const char *p, size_t i, char buf[4])
{
	if (i >= strlen(p))
		return "no layer";
	snprintf(buf, 4, "'%c'", p[i]);
	return buf;
}

/*
 * Two layer patterns that differ: both in full when they are short, else
 * the first layer where they part (a whole pattern may be 1024 letters).
 */
static int pattern_mismatch(const char *cfg, const char *trace, struct rlb_err *err)
{
	size_t i = 0, nc = strlen(cfg), nt = strlen(trace);
	char a[4], b[4];

	if (nc <= 64 && nt <= 64)
		return rlb_err_set(err, RLB_EMISMATCH,
				   "the config does not match the trace: 'model.layer_pattern' is \"%s\" in the config, \"%s\" in the trace",
				   cfg, trace);
	while (cfg[i] && cfg[i] == trace[i])
		i++;
	return rlb_err_set(err, RLB_EMISMATCH,
			   "the config does not match the trace: 'model.layer_pattern' differs at layer %zu "
			   "(%s in the config, %s in the trace; %zu and %zu layers)", i,
			   pattern_at(cfg, i, a), pattern_at(trace, i, b), nc, nt);
}

int rlb_trace_header_check(const struct rlb_trace_header *h,
			   const struct rlb_config *cfg, struct rlb_err *err)
{
	static const char *const names[] = {
		"model.experts", "model.topk", "model.moe_layers",
		"model.first_dense_layers", "model.moe_layer_period",
		"model.moe_layer_offset",
	};
	const long long have[] = {
		cfg->model.experts, cfg->model.topk, cfg->model.moe_layers,
		cfg->model.first_dense_layers,
		cfg->model.moe_layer_period > 1 ? cfg->model.moe_layer_period : 1,
		cfg->model.moe_layer_offset,
	};
	const long long want[] = {
		h->experts, h->topk, h->moe_layers, h->first_dense_layers,
		h->moe_layer_period, h->moe_layer_offset,
	};
	size_t i;

	for (i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		if (have[i] != want[i])
			return rlb_err_set(err, RLB_EMISMATCH,
					   "the config does not match the trace: '%s' is %lld in the config, %lld in the trace",
					   names[i], have[i], want[i]);
	if (strncmp(cfg->model.layer_pattern, h->layer_pattern, sizeof(h->layer_pattern)))
		return pattern_mismatch(cfg->model.layer_pattern, h->layer_pattern, err);
	return 0;
}

unsigned rlb_trace_id_bytes(const struct rlb_trace_header *h)
{
	return h->experts <= 256 ? 1 : 2;
}

/* CRC-32C table: the reflected Castagnoli polynomial 0x82F63B78. */
static const uint32_t crc_table[256] = {
	0x00000000, 0xf26b8303, 0xe13b70f7, 0x1350f3f4, 0xc79a971f, 0x35f1141c,
	0x26a1e7e8, 0xd4ca64eb, 0x8ad958cf, 0x78b2dbcc, 0x6be22838, 0x9989ab3b,
	0x4d43cfd0, 0xbf284cd3, 0xac78bf27, 0x5e133c24, 0x105ec76f, 0xe235446c,
	0xf165b798, 0x030e349b, 0xd7c45070, 0x25afd373, 0x36ff2087, 0xc494a384,
	0x9a879fa0, 0x68ec1ca3, 0x7bbcef57, 0x89d76c54, 0x5d1d08bf, 0xaf768bbc,
	0xbc267848, 0x4e4dfb4b, 0x20bd8ede, 0xd2d60ddd, 0xc186fe29, 0x33ed7d2a,
	0xe72719c1, 0x154c9ac2, 0x061c6936, 0xf477ea35, 0xaa64d611, 0x580f5512,
	0x4b5fa6e6, 0xb93425e5, 0x6dfe410e, 0x9f95c20d, 0x8cc531f9, 0x7eaeb2fa,
	0x30e349b1, 0xc288cab2, 0xd1d83946, 0x23b3ba45, 0xf779deae, 0x05125dad,
	0x1642ae59, 0xe4292d5a, 0xba3a117e, 0x4851927d, 0x5b016189, 0xa96ae28a,
	0x7da08661, 0x8fcb0562, 0x9c9bf696, 0x6ef07595, 0x417b1dbc, 0xb3109ebf,
	0xa0406d4b, 0x522bee48, 0x86e18aa3, 0x748a09a0, 0x67dafa54, 0x95b17957,
	0xcba24573, 0x39c9c670, 0x2a993584, 0xd8f2b687, 0x0c38d26c, 0xfe53516f,
	0xed03a29b, 0x1f682198, 0x5125dad3, 0xa34e59d0, 0xb01eaa24, 0x42752927,
	0x96bf4dcc, 0x64d4cecf, 0x77843d3b, 0x85efbe38, 0xdbfc821c, 0x2997011f,
	0x3ac7f2eb, 0xc8ac71e8, 0x1c661503, 0xee0d9600, 0xfd5d65f4, 0x0f36e6f7,
	0x61c69362, 0x93ad1061, 0x80fde395, 0x72966096, 0xa65c047d, 0x5437877e,
	0x4767748a, 0xb50cf789, 0xeb1fcbad, 0x197448ae, 0x0a24bb5a, 0xf84f3859,
	0x2c855cb2, 0xdeeedfb1, 0xcdbe2c45, 0x3fd5af46, 0x7198540d, 0x83f3d70e,
	0x90a324fa, 0x62c8a7f9, 0xb602c312, 0x44694011, 0x5739b3e5, 0xa55230e6,
	0xfb410cc2, 0x092a8fc1, 0x1a7a7c35, 0xe811ff36, 0x3cdb9bdd, 0xceb018de,
	0xdde0eb2a, 0x2f8b6829, 0x82f63b78, 0x709db87b, 0x63cd4b8f, 0x91a6c88c,
	0x456cac67, 0xb7072f64, 0xa457dc90, 0x563c5f93, 0x082f63b7, 0xfa44e0b4,
	0xe9141340, 0x1b7f9043, 0xcfb5f4a8, 0x3dde77ab, 0x2e8e845f, 0xdce5075c,
	0x92a8fc17, 0x60c37f14, 0x73938ce0, 0x81f80fe3, 0x55326b08, 0xa759e80b,
	0xb4091bff, 0x466298fc, 0x1871a4d8, 0xea1a27db, 0xf94ad42f, 0x0b21572c,
	0xdfeb33c7, 0x2d80b0c4, 0x3ed04330, 0xccbbc033, 0xa24bb5a6, 0x502036a5,
	0x4370c551, 0xb11b4652, 0x65d122b9, 0x97baa1ba, 0x84ea524e, 0x7681d14d,
	0x2892ed69, 0xdaf96e6a, 0xc9a99d9e, 0x3bc21e9d, 0xef087a76, 0x1d63f975,
	0x0e330a81, 0xfc588982, 0xb21572c9, 0x407ef1ca, 0x532e023e, 0xa145813d,
	0x758fe5d6, 0x87e466d5, 0x94b49521, 0x66df1622, 0x38cc2a06, 0xcaa7a905,
	0xd9f75af1, 0x2b9cd9f2, 0xff56bd19, 0x0d3d3e1a, 0x1e6dcdee, 0xec064eed,
	0xc38d26c4, 0x31e6a5c7, 0x22b65633, 0xd0ddd530, 0x0417b1db, 0xf67c32d8,
	0xe52cc12c, 0x1747422f, 0x49547e0b, 0xbb3ffd08, 0xa86f0efc, 0x5a048dff,
	0x8ecee914, 0x7ca56a17, 0x6ff599e3, 0x9d9e1ae0, 0xd3d3e1ab, 0x21b862a8,
	0x32e8915c, 0xc083125f, 0x144976b4, 0xe622f5b7, 0xf5720643, 0x07198540,
	0x590ab964, 0xab613a67, 0xb831c993, 0x4a5a4a90, 0x9e902e7b, 0x6cfbad78,
	0x7fab5e8c, 0x8dc0dd8f, 0xe330a81a, 0x115b2b19, 0x020bd8ed, 0xf0605bee,
	0x24aa3f05, 0xd6c1bc06, 0xc5914ff2, 0x37faccf1, 0x69e9f0d5, 0x9b8273d6,
	0x88d28022, 0x7ab90321, 0xae7367ca, 0x5c18e4c9, 0x4f48173d, 0xbd23943e,
	0xf36e6f75, 0x0105ec76, 0x12551f82, 0xe03e9c81, 0x34f4f86a, 0xc69f7b69,
	0xd5cf889d, 0x27a40b9e, 0x79b737ba, 0x8bdcb4b9, 0x988c474d, 0x6ae7c44e,
	0xbe2da0a5, 0x4c4623a6, 0x5f16d052, 0xad7d5351,
};

ZSTD_DCtx *rlb_rrt_dctx_new(void)
{
	ZSTD_DCtx *d = ZSTD_createDCtx();

#ifdef FUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION
	if (d)
		(void)ZSTD_DCtx_setParameter(d, ZSTD_d_forceIgnoreChecksum,
					     ZSTD_d_ignoreChecksum);
#endif
	return d;
}

uint32_t rlb_rrt_crc32c_update(uint32_t crc, const void *data, size_t n)
{
	const uint8_t *p = data;
	uint32_t c = ~crc;

	while (n--)
		c = crc_table[(c ^ *p++) & 0xFF] ^ (c >> 8);
	return ~c;
}

uint32_t rlb_rrt_crc32c(const void *data, size_t n)
{
	return rlb_rrt_crc32c_update(0, data, n);
}

static int name_ok(const char *s, size_t size)
{
	return memchr(s, '\0', size) != NULL;
}

/*
 * A layer pattern (1.2): its letters, as many 'E' as MoE layers, and no
 * periodic layout beside it (the rules of model.layer_pattern).
 */
static int check_pattern(const struct rlb_trace_header *h, const char *what,
			 struct rlb_err *err)
{
	const char *p = h->layer_pattern;
	long bad, moe;

	if (!memchr(p, '\0', sizeof(h->layer_pattern)))
		return rlb_err_set(err, RLB_EINVAL,
				   "%s: layer pattern is not NUL-terminated", what);
	if (!*p)
		return 0;
	bad = rlb_layer_pattern_scan(p, strlen(p), &moe);
	if (bad >= 0)
		return rlb_err_set(err, RLB_EINVAL,
				   "%s: layer pattern has byte 0x%02x at layer %ld (expected E, M, * or -)",
				   what, (unsigned char)p[bad], bad);
	if (moe != (long)h->moe_layers)
		return rlb_err_set(err, RLB_EINVAL,
				   "%s: layer pattern has %ld MoE layers ('E'), moe_layers is %u",
				   what, moe, h->moe_layers);
	if (h->first_dense_layers || h->moe_layer_period > 1 || h->moe_layer_offset)
		return rlb_err_set(err, RLB_EINVAL,
				   "%s: a layer pattern with first_dense_layers %u, moe_layer_period %u, "
				   "moe_layer_offset %u (expected 0, 1, 0)", what, h->first_dense_layers,
				   h->moe_layer_period, h->moe_layer_offset);
	return 0;
}

int rlb_rrt_check_shape(const struct rlb_trace_header *h, const char *what,
			struct rlb_err *err)
{
	uint32_t unknown = h->flags & ~RRT_FLAGS_KNOWN & RRT_FLAGS_REQUIRED;
	int ret;

	if (h->experts < 1 || h->experts > RLB_TRACE_MAX_EXPERTS)
		return rlb_err_set(err, RLB_ERANGE,
				   "%s: experts %u is out of range [1, %u]",
				   what, h->experts, RLB_TRACE_MAX_EXPERTS);
	if (h->topk < 1 || h->topk > RLB_TRACE_MAX_TOPK)
		return rlb_err_set(err, RLB_ERANGE,
				   "%s: topk %u is out of range [1, %u]",
				   what, h->topk, RLB_TRACE_MAX_TOPK);
	if (h->topk > h->experts)
		return rlb_err_set(err, RLB_ERANGE,
				   "%s: topk %u exceeds experts %u", what,
				   h->topk, h->experts);
	if (h->moe_layers < 1 || h->moe_layers > RLB_TRACE_MAX_LAYERS)
		return rlb_err_set(err, RLB_ERANGE,
				   "%s: moe_layers %u is out of range [1, %u]",
				   what, h->moe_layers, RLB_TRACE_MAX_LAYERS);
	if (h->moe_layer_period > RLB_MAX_MOE_LAYER_PERIOD)
		return rlb_err_set(err, RLB_ERANGE,
				   "%s: moe_layer_period %u is out of range [1, %d]",
				   what, h->moe_layer_period, RLB_MAX_MOE_LAYER_PERIOD);
	if (h->moe_layer_offset >= (h->moe_layer_period > 1 ? h->moe_layer_period : 1))
		return rlb_err_set(err, RLB_ERANGE,
				   "%s: moe_layer_offset %u is not below moe_layer_period %u",
				   what, h->moe_layer_offset,
				   h->moe_layer_period > 1 ? h->moe_layer_period : 1);
	ret = check_pattern(h, what, err);
	if (ret != 0)
		return ret;
	if (unknown)
		return rlb_err_set(err, RLB_EUNSUPPORTED,
				   "%s: unknown flags 0x%08x", what, unknown);
	if (!name_ok(h->model, sizeof(h->model)))
		return rlb_err_set(err, RLB_EINVAL,
				   "%s: model name is not NUL-terminated", what);
	if (!name_ok(h->source, sizeof(h->source)))
		return rlb_err_set(err, RLB_EINVAL,
				   "%s: source is not NUL-terminated", what);
	if (!rlb_utf8_ok(h->model))
		return rlb_err_set(err, RLB_EINVAL, "%s: model name is not UTF-8", what);
	if (!rlb_utf8_ok(h->source))
		return rlb_err_set(err, RLB_EINVAL, "%s: source is not UTF-8", what);
	return 0;
}

/* Copy a NUL-terminated name into a zero-padded field. */
static void put_name(uint8_t *p, const char *s, size_t size)
{
	size_t n = strnlen(s, size - 1);

	memset(p, 0, size);
	memcpy(p, s, n);
}

/* Letters of a 1.2 header's pattern, padded to 4 bytes. */
static size_t pattern_bytes(size_t len)
{
	return (len + 3) & ~(size_t)3;
}

size_t rlb_rrt_header_size(const struct rlb_trace_header *h)
{
	size_t len = strnlen(h->layer_pattern, sizeof(h->layer_pattern) - 1);

	if (len)
		return RRT_H_SIZE_1_2 + pattern_bytes(len);
	return h->moe_layer_period > 1 ? RRT_H_SIZE_1_1 : RRT_H_SIZE;
}

unsigned rlb_rrt_header_minor(const struct rlb_trace_header *h)
{
	size_t size = rlb_rrt_header_size(h);

	return size == RRT_H_SIZE ? 0 : size == RRT_H_SIZE_1_1 ? 1 : 2;
}

size_t rlb_rrt_header_encode(const struct rrt_shape *s, uint8_t *out, size_t cap)
{
	uint8_t *p = out + 8;
	size_t size = rlb_rrt_header_size(&s->h);
	size_t end = size - 4;

	if (cap < 8 + size)
		return 0;
	memset(out, 0, 8 + size);
	rlb_put_u32(out, RRT_HEADER_MAGIC);
	rlb_put_u32(out + 4, (uint32_t)size);
	memcpy(p + RRT_H_MAGIC, RRT_HEADER_ID, 8);
	rlb_put_u16(p + RRT_H_MAJOR, RLB_TRACE_VERSION_MAJOR);
	/*
	 * 1.0 when the layers are not interleaved, 1.1 for a periodic
	 * layout, 1.2 for a pattern: each trace stays as it was before
	 * the next minor.
	 */
	rlb_put_u16(p + RRT_H_MINOR, (uint16_t)rlb_rrt_header_minor(&s->h));
	rlb_put_u32(p + RRT_H_FLAGS, s->h.flags);
	rlb_put_u32(p + RRT_H_EXPERTS, s->h.experts);
	rlb_put_u32(p + RRT_H_TOPK, s->h.topk);
	rlb_put_u32(p + RRT_H_LAYERS, s->h.moe_layers);
	rlb_put_u32(p + RRT_H_DENSE, s->h.first_dense_layers);
	rlb_put_u64(p + RRT_H_SEED, s->h.seed);
	p[RRT_H_ID_BYTES] = (uint8_t)s->id_bytes;
	p[RRT_H_ID_CODING] = (uint8_t)s->id_coding;
	p[RRT_H_GATE_CODING] = (uint8_t)s->gate_coding;
	rlb_put_u32(p + RRT_H_CHUNK, s->chunk_tokens);
	rlb_put_u32(p + RRT_H_FRAME_BYTES, s->frame_bytes);
	put_name(p + RRT_H_MODEL, s->h.model, 64);
	put_name(p + RRT_H_SOURCE, s->h.source, 32);
	if (size >= RRT_H_SIZE_1_1) {
		rlb_put_u16(p + RRT_H_PERIOD, (uint16_t)s->h.moe_layer_period);
		rlb_put_u16(p + RRT_H_OFFSET, (uint16_t)s->h.moe_layer_offset);
	}
	if (size >= RRT_H_SIZE_1_2) {
		size_t len = strlen(s->h.layer_pattern);

		rlb_put_u16(p + RRT_H_PATTERN_LEN, (uint16_t)len);
		memcpy(p + RRT_H_PATTERN, s->h.layer_pattern, len);
	}
	rlb_put_u32(p + end, rlb_rrt_crc32c(p, end));
	return 8 + size;
}

/* A name field: NUL-terminated and zero after the terminator. */
static int get_name(const uint8_t *p, size_t size, char *out, size_t outsize)
{
	const uint8_t *nul = memchr(p, '\0', size);
	size_t i;

	if (!nul || (size_t)(nul - p) >= outsize)
		return -1;
	for (i = (size_t)(nul - p); i < size; i++)
		if (p[i] != 0)
			return -1;
	memset(out, 0, outsize);
	memcpy(out, p, (size_t)(nul - p));
	return 0;
}

/*
 * A 1.2 header's layer pattern into out (none for length 0, which
 * writers of 1.2 do not write but a later minor may): -1 for a length
 * above RLB_TRACE_MAX_LAYERS or a reserved field that is not zero, -2
 * for a NUL among the letters or padding that is not zero (the letters
 * themselves are checked with the shape).
 */
static int get_pattern(const uint8_t *p, char *out)
{
	size_t len = rlb_get_u16(p + RRT_H_PATTERN_LEN), i;

	if (len > RLB_TRACE_MAX_LAYERS || rlb_get_u16(p + RRT_H_PATTERN_LEN + 2))
		return -1;
	if (memchr(p + RRT_H_PATTERN, '\0', len))
		return -2;
	for (i = len; i < pattern_bytes(len); i++)
		if (p[RRT_H_PATTERN + i])
			return -2;
	memcpy(out, p + RRT_H_PATTERN, len);
	out[len] = '\0';
	return 0;
}

int rlb_rrt_header_decode(const uint8_t *p, size_t len, struct rrt_shape *s,
			  struct rlb_err *err)
{
	uint32_t stored, crc, required;
	unsigned major, minor;
	size_t want;
	int ret;

	memset(s, 0, sizeof(*s));
	if (len < 8 + 4 || memcmp(p + RRT_H_MAGIC, RRT_HEADER_ID, 8) != 0)
		return rlb_err_set(err, RLB_ECORRUPT, "header at offset 8: bad magic (%s)",
				   len >= 8 && !memcmp(p, RLP_HEADER_ID, 8) ?
				   "a relibra plan, not a trace" : "not a relibra trace");
	major = rlb_get_u16(p + RRT_H_MAJOR);
	minor = rlb_get_u16(p + RRT_H_MINOR);
	if (major != RLB_TRACE_VERSION_MAJOR)
		return rlb_err_set(err, RLB_EVERSION,
				   "header at offset 16: unsupported trace version %u.%u (this reader supports %d.x)",
				   major, minor, RLB_TRACE_VERSION_MAJOR);
	want = minor == 0 ? RRT_H_SIZE : minor == 1 ? RRT_H_SIZE_1_1 : RRT_H_SIZE_1_2;
	if (minor >= 2 && len >= want)
		want += pattern_bytes(rlb_get_u16(p + RRT_H_PATTERN_LEN));
	if (len < want || (minor <= RLB_TRACE_VERSION_MINOR && len != want))
		return rlb_err_set(err, RLB_ECORRUPT,
				   "header at offset 4: content size %zu, expected %s%zu for version %u.%u",
				   len, minor > RLB_TRACE_VERSION_MINOR ? "at least " : "",
				   want, major, minor);
	stored = rlb_get_u32(p + len - 4);
	crc = rlb_rrt_crc32c(p, len - 4);
	if (!rrt_crc_ok(stored, crc))
		return rlb_err_set(err, RLB_ECORRUPT,
				   "header at offset %zu: checksum mismatch (stored 0x%08x, computed 0x%08x)",
				   8 + len - 4, stored, crc);
	s->h.version_major = (uint16_t)major;
	s->h.version_minor = (uint16_t)minor;
	s->h.flags = rlb_get_u32(p + RRT_H_FLAGS);
	s->h.experts = rlb_get_u32(p + RRT_H_EXPERTS);
	s->h.topk = rlb_get_u32(p + RRT_H_TOPK);
	s->h.moe_layers = rlb_get_u32(p + RRT_H_LAYERS);
	s->h.first_dense_layers = rlb_get_u32(p + RRT_H_DENSE);
	s->h.moe_layer_period = minor == 0 ? 1 : rlb_get_u16(p + RRT_H_PERIOD);
	s->h.moe_layer_offset = minor == 0 ? 0 : rlb_get_u16(p + RRT_H_OFFSET);
	if (s->h.moe_layer_period == 0)
		return rlb_err_set(err, RLB_ECORRUPT,
				   "header at offset %d: moe_layer_period is 0",
				   8 + RRT_H_PERIOD);
	if (minor >= 2) {
		ret = get_pattern(p, s->h.layer_pattern);
		if (ret < 0)
			return rlb_err_set(err, RLB_ECORRUPT,
					   "header at offset %d: %s", 8 + (ret == -1 ? RRT_H_PATTERN_LEN :
					   RRT_H_PATTERN), ret == -1 ?
					   "layer pattern length above 1024 or reserved field not 0" :
					   "layer pattern is not letters followed by zero padding");
	}
	s->h.seed = rlb_get_u64(p + RRT_H_SEED);
	s->id_bytes = p[RRT_H_ID_BYTES];
	s->id_coding = p[RRT_H_ID_CODING];
	s->gate_coding = p[RRT_H_GATE_CODING];
	s->chunk_tokens = rlb_get_u32(p + RRT_H_CHUNK);
	s->frame_bytes = rlb_get_u32(p + RRT_H_FRAME_BYTES);
	if (get_name(p + RRT_H_MODEL, 64, s->h.model, sizeof(s->h.model)) != 0)
		return rlb_err_set(err, RLB_ECORRUPT,
				   "header at offset %d: bad model name field",
				   8 + RRT_H_MODEL);
	if (!rlb_utf8_ok(s->h.model))
		return rlb_err_set(err, RLB_ECORRUPT,
				   "header at offset %d: model name is not UTF-8",
				   8 + RRT_H_MODEL);
	if (get_name(p + RRT_H_SOURCE, 32, s->h.source, sizeof(s->h.source)) != 0)
		return rlb_err_set(err, RLB_ECORRUPT,
				   "header at offset %d: bad source field",
				   8 + RRT_H_SOURCE);
	if (!rlb_utf8_ok(s->h.source))
		return rlb_err_set(err, RLB_ECORRUPT,
				   "header at offset %d: source is not UTF-8",
				   8 + RRT_H_SOURCE);
	ret = rlb_rrt_check_shape(&s->h, "header at offset 8", err);
	if (ret != 0 && ret != RLB_EUNSUPPORTED) {
		/* a bad shape in a file is corruption (the error says which) */
		ret = RLB_ECORRUPT;
		if (err)
			err->code = ret;
	}
	if (ret != 0)
		return ret;
	required = s->h.flags & RRT_FLAGS_REQUIRED;
	s->h.flags = required;	/* optional bits of newer minors dropped */
	if (s->id_bytes != rlb_trace_id_bytes(&s->h))
		return rlb_err_set(err, RLB_ECORRUPT,
				   "header at offset %d: id width %u does not match %u experts",
				   8 + RRT_H_ID_BYTES, s->id_bytes, s->h.experts);
	if (s->id_coding > RRT_CODING_DELTA ||
	    (s->id_coding == RRT_CODING_RANK && s->id_bytes != 1) ||
	    (s->id_coding == RRT_CODING_DELTA && !(s->h.flags & RLB_TRACE_F_SORTED)))
		return rlb_err_set(err, RLB_ECORRUPT,
				   "header at offset %d: id coding %u is invalid here",
				   8 + RRT_H_ID_CODING, s->id_coding);
	if (s->gate_coding != ((s->h.flags & RLB_TRACE_F_GATES) ?
			       RRT_GATES_F32 : RRT_GATES_NONE))
		return rlb_err_set(err, RLB_ECORRUPT,
				   "header at offset %d: gate coding %u does not match the flags",
				   8 + RRT_H_GATE_CODING, s->gate_coding);
	if (p[RRT_H_RESERVED0] != 0 || rlb_get_u32(p + RRT_H_RESERVED1) != 0)
		return rlb_err_set(err, RLB_ECORRUPT,
				   "header at offset %d: reserved bytes are not zero",
				   8 + (p[RRT_H_RESERVED0] ? RRT_H_RESERVED0 : RRT_H_RESERVED1));
	if (s->id_coding == RRT_CODING_RANK ?
	    (s->chunk_tokens < 1 || s->chunk_tokens > RLB_TRACE_MAX_SEQ_TOKENS) :
	    s->chunk_tokens != 0)
		return rlb_err_set(err, RLB_ECORRUPT,
				   "header at offset %d: chunk size %u is invalid",
				   8 + RRT_H_CHUNK, s->chunk_tokens);
	if (s->frame_bytes < 1 || s->frame_bytes > RRT_MAX_FRAME_RAW)
		return rlb_err_set(err, RLB_ECORRUPT,
				   "header at offset %d: frame size %u is out of range",
				   8 + RRT_H_FRAME_BYTES, s->frame_bytes);
	return 0;
}

/*
 * Id decoding kernels.  The reader spends most of its time outside zstd
 * here, so the byte loops use SSE2 (baseline on x86-64) and the rank
 * lookup uses AVX-512 VBMI where the CPU has it; each has a plain C path
 * that gives the same result.
 */
int rlb_rrt_simd = 1;

static unsigned ctz64(uint64_t v)
{
#ifdef __GNUC__
	return (unsigned)__builtin_ctzll(v);
#else
	unsigned n = 0;

	while (!(v & 1)) {
		v >>= 1;
		n++;
	}
	return n;
#endif
}

unsigned rlb_rrt_max_u8(const uint8_t *p, size_t n)
{
	unsigned m = 0;
	size_t i = 0;

#ifdef __SSE2__
	if (rlb_rrt_simd && n >= 16) {
		__m128i mx = _mm_setzero_si128();
		uint8_t b[16];
		int j;

		for (; i + 16 <= n; i += 16)
			mx = _mm_max_epu8(mx, _mm_loadu_si128((const __m128i *)(p + i)));
		_mm_storeu_si128((__m128i *)b, mx);
		for (j = 0; j < 16; j++)
			m = b[j] > m ? b[j] : m;
	}
#endif
	for (; i < n; i++)
		m = p[i] > m ? p[i] : m;
	return m;
}

unsigned rlb_rrt_max_u16(const uint16_t *p, size_t n)
{
	unsigned m = 0;
	size_t i = 0;

#ifdef __SSE2__
	if (rlb_rrt_simd && n >= 8) {
		/* Signed 16-bit max on values shifted by 0x8000. */
		__m128i bias = _mm_set1_epi16((short)0x8000), mx = _mm_set1_epi16((short)0x8000);
		uint16_t b[8];
		int j;

		for (; i + 8 <= n; i += 8)
			mx = _mm_max_epi16(mx, _mm_xor_si128(
				_mm_loadu_si128((const __m128i *)(p + i)), bias));
		_mm_storeu_si128((__m128i *)b, _mm_xor_si128(mx, bias));
		for (j = 0; j < 8; j++)
			m = b[j] > m ? b[j] : m;
	}
#endif
	for (; i < n; i++)
		m = p[i] > m ? p[i] : m;
	return m;
}

unsigned rlb_rrt_widen_u8(const uint8_t *p, uint16_t *o, size_t n)
{
	unsigned m = 0;
	size_t i = 0;

#ifdef __SSE2__
	if (rlb_rrt_simd && n >= 16) {
		__m128i z = _mm_setzero_si128(), mx = z;
		uint8_t b[16];
		int j;

		for (; i + 16 <= n; i += 16) {
			__m128i v = _mm_loadu_si128((const __m128i *)(p + i));

			mx = _mm_max_epu8(mx, v);
			_mm_storeu_si128((__m128i *)(o + i), _mm_unpacklo_epi8(v, z));
			_mm_storeu_si128((__m128i *)(o + i + 8), _mm_unpackhi_epi8(v, z));
		}
		_mm_storeu_si128((__m128i *)b, mx);
		for (j = 0; j < 16; j++)
			m = b[j] > m ? b[j] : m;
	}
#endif
	for (; i < n; i++) {
		o[i] = p[i];
		m = p[i] > m ? p[i] : m;
	}
	return m;
}

unsigned rlb_rrt_undelta_u8(const uint8_t *p, uint16_t *o, size_t rows, unsigned k)
{
	unsigned m = 0;
	size_t t = 0, j;

#ifdef __SSE2__
	if (rlb_rrt_simd && k == 8 && rows >= 2) {
		__m128i z = _mm_setzero_si128(), mx = z;
		uint16_t b[8];

		for (; t + 2 <= rows; t += 2) {
			__m128i v = _mm_loadu_si128((const __m128i *)(p + t * 8));
			__m128i a = _mm_unpacklo_epi8(v, z), c = _mm_unpackhi_epi8(v, z);

			a = _mm_add_epi16(a, _mm_slli_si128(a, 2));
			c = _mm_add_epi16(c, _mm_slli_si128(c, 2));
			a = _mm_add_epi16(a, _mm_slli_si128(a, 4));
			c = _mm_add_epi16(c, _mm_slli_si128(c, 4));
			a = _mm_add_epi16(a, _mm_slli_si128(a, 8));
			c = _mm_add_epi16(c, _mm_slli_si128(c, 8));
			mx = _mm_max_epi16(mx, _mm_max_epi16(a, c));
			_mm_storeu_si128((__m128i *)(o + t * 8), a);
			_mm_storeu_si128((__m128i *)(o + t * 8 + 8), c);
		}
		_mm_storeu_si128((__m128i *)b, mx);
		for (j = 0; j < 8; j++)
			m = b[j] > m ? b[j] : m;
	}
#endif
	for (; t < rows; t++) {
		unsigned a = 0;

		for (j = 0; j < k; j++) {
			a += p[t * k + j];
			o[t * k + j] = (uint16_t)a;
		}
		m = a > m ? a : m;
	}
	return m;
}

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define RRT_HAVE_VBMI 1

static int have_vbmi(void)
{
	return __builtin_cpu_supports("avx512vbmi") && __builtin_cpu_supports("avx512bw");
}

static int have_vbmi2(void)
{
	return __builtin_cpu_supports("avx512vbmi2") && __builtin_cpu_supports("avx512bw");
}

/* Map 64 ranks at a time; returns how many were done and their max. */
__attribute__((target("avx512f,avx512bw,avx512vbmi")))
static size_t map_vbmi(const uint8_t *p, uint16_t *o, size_t n,
		       const uint8_t *lut, unsigned *max)
{
	__m512i t0 = _mm512_loadu_si512(lut), t1 = _mm512_loadu_si512(lut + 64);
	__m512i t2 = _mm512_loadu_si512(lut + 128), t3 = _mm512_loadu_si512(lut + 192);
	__m512i mx = _mm512_setzero_si512();
	uint8_t b[64];
	size_t i;
	int j;

	for (i = 0; i + 64 <= n; i += 64) {
		__m512i x = _mm512_loadu_si512(p + i);
		__m512i lo = _mm512_permutex2var_epi8(t0, x, t1);
		__m512i hi = _mm512_permutex2var_epi8(t2, x, t3);
		__m512i y = _mm512_mask_blend_epi8(_mm512_movepi8_mask(x), lo, hi);

		mx = _mm512_max_epu8(mx, x);
		_mm512_storeu_si512(o + i, _mm512_cvtepu8_epi16(_mm512_castsi512_si256(y)));
		_mm512_storeu_si512(o + i + 32,
				    _mm512_cvtepu8_epi16(_mm512_extracti64x4_epi64(y, 1)));
	}
	_mm512_storeu_si512(b, mx);
	for (j = 0; j < 64; j++)
		*max = b[j] > *max ? b[j] : *max;
	return i;
}

/* The unlisted ids, ascending, from lut + n on; returns the next rank. */
__attribute__((target("avx512f,avx512bw,avx512vbmi2")))
static unsigned rest_vbmi2(const uint64_t *listed, unsigned n, unsigned experts,
			   uint8_t *lut)
{
	unsigned b;

	for (b = 0; b * 64 < experts; b++) {
		uint64_t rest = ~listed[b];
		__m512i iota = _mm512_add_epi8(_mm512_set1_epi8((char)(b * 64)),
			_mm512_set_epi8(63, 62, 61, 60, 59, 58, 57, 56, 55, 54, 53, 52,
					51, 50, 49, 48, 47, 46, 45, 44, 43, 42, 41, 40,
					39, 38, 37, 36, 35, 34, 33, 32, 31, 30, 29, 28,
					27, 26, 25, 24, 23, 22, 21, 20, 19, 18, 17, 16,
					15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2,
					1, 0));

		if (experts - b * 64 < 64)
			rest &= (1ull << (experts - b * 64)) - 1;
		_mm512_storeu_si512(lut + n, _mm512_maskz_compress_epi8(rest, iota));
		n += (unsigned)__builtin_popcountll(rest);
	}
	return n;
}
#endif

unsigned rlb_rrt_rank_rest(const uint64_t *listed, unsigned n, unsigned experts,
			   uint8_t *lut)
{
	unsigned b;

#ifdef RRT_HAVE_VBMI
	if (rlb_rrt_simd && have_vbmi2())
		return rest_vbmi2(listed, n, experts, lut);
#endif
	for (b = 0; b * 64 < experts; b++) {
		uint64_t rest = ~listed[b];

		if (experts - b * 64 < 64)
			rest &= (1ull << (experts - b * 64)) - 1;
		while (rest) {
			lut[n++] = (uint8_t)(b * 64 + ctz64(rest));
			rest &= rest - 1;
		}
	}
	return n;
}

unsigned rlb_rrt_map_u8(const uint8_t *p, uint16_t *o, size_t n, const uint8_t *lut)
{
	unsigned mx = 0, tail;
	size_t i = 0;

#ifdef RRT_HAVE_VBMI
	if (rlb_rrt_simd && n >= 64 && have_vbmi())
		i = map_vbmi(p, o, n, lut, &mx);
#endif
	tail = rlb_rrt_max_u8(p + i, n - i);
	mx = tail > mx ? tail : mx;
	for (; i + 8 <= n; i += 8) {
		uint64_t v;

		memcpy(&v, p + i, 8);
		o[i] = lut[v & 255];
		o[i + 1] = lut[(v >> 8) & 255];
		o[i + 2] = lut[(v >> 16) & 255];
		o[i + 3] = lut[(v >> 24) & 255];
		o[i + 4] = lut[(v >> 32) & 255];
		o[i + 5] = lut[(v >> 40) & 255];
		o[i + 6] = lut[(v >> 48) & 255];
		o[i + 7] = lut[v >> 56];
	}
	for (; i < n; i++)
		o[i] = lut[p[i]];
	return mx;
}
