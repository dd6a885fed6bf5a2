/*
 * trace.c - the parts of the trace format (.rrt) shared by the writer and
 * the reader: the header frame, its checks, and the CRC-32C that guards
 * the header and the step index.  Layout: trace_format/SPEC.md.
 */
#include <string.h>

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
	/* Both are RLB_NAME_MAX bytes; keep the copy NUL-terminated. */
	memcpy(h->model, cfg->model.name, sizeof(h->model) - 1);
	h->model[sizeof(h->model) - 1] = '\0';
}

unsigned rlb_trace_id_bytes(const struct rlb_trace_header *h)
{
	return h->experts <= 256 ? 1 : 2;
}

/* Table of the reflected Castagnoli polynomial, built on first use. */
static uint32_t crc_table[256];
static int crc_ready;

static void crc_init(void)
{
	uint32_t i, c;
	int k;

	for (i = 0; i < 256; i++) {
		c = i;
		for (k = 0; k < 8; k++)
			c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
		crc_table[i] = c;
	}
	crc_ready = 1;
}

uint32_t rrt_crc32c_update(uint32_t crc, const void *data, size_t n)
{
	const uint8_t *p = data;
	uint32_t c = ~crc;

	if (!crc_ready)
		crc_init();
	while (n--)
		c = crc_table[(c ^ *p++) & 0xFF] ^ (c >> 8);
	return ~c;
}

uint32_t rrt_crc32c(const void *data, size_t n)
{
	return rrt_crc32c_update(0, data, n);
}

static int name_ok(const char *s, size_t size)
{
	return memchr(s, '\0', size) != NULL;
}

int rrt_check_shape(const struct rlb_trace_header *h, const char *what,
		    struct rlb_err *err)
{
	uint32_t unknown = h->flags & ~RRT_FLAGS_KNOWN & RRT_FLAGS_REQUIRED;

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
	if (unknown)
		return rlb_err_set(err, RLB_EUNSUPPORTED,
				   "%s: unknown flags 0x%08x", what, unknown);
	if (!name_ok(h->model, sizeof(h->model)))
		return rlb_err_set(err, RLB_EINVAL,
				   "%s: model name is not NUL-terminated", what);
	if (!name_ok(h->source, sizeof(h->source)))
		return rlb_err_set(err, RLB_EINVAL,
				   "%s: source is not NUL-terminated", what);
	return 0;
}

/* Copy a NUL-terminated name into a zero-padded field. */
static void put_name(uint8_t *p, const char *s, size_t size)
{
	size_t n = strnlen(s, size - 1);

	memset(p, 0, size);
	memcpy(p, s, n);
}

size_t rrt_header_encode(const struct rrt_shape *s, uint8_t *out, size_t cap)
{
	uint8_t *p = out + 8;

	if (cap < 8 + RRT_H_SIZE)
		return 0;
	memset(out, 0, 8 + RRT_H_SIZE);
	rlb_put_u32(out, RRT_HEADER_MAGIC);
	rlb_put_u32(out + 4, RRT_H_SIZE);
	memcpy(p + RRT_H_MAGIC, RRT_HEADER_ID, 8);
	rlb_put_u16(p + RRT_H_MAJOR, RLB_TRACE_VERSION_MAJOR);
	rlb_put_u16(p + RRT_H_MINOR, RLB_TRACE_VERSION_MINOR);
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
	rlb_put_u32(p + RRT_H_END, rrt_crc32c(p, RRT_H_END));
	return 8 + RRT_H_SIZE;
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

int rrt_header_decode(const uint8_t *p, size_t len, struct rrt_shape *s,
		      struct rlb_err *err)
{
	uint32_t stored, crc, required;
	unsigned major, minor;
	int ret;

	memset(s, 0, sizeof(*s));
	if (len < 8 + 4 || memcmp(p + RRT_H_MAGIC, RRT_HEADER_ID, 8) != 0)
		return rlb_err_set(err, RLB_ECORRUPT,
				   "header at offset 8: bad magic (not a relibra trace)");
	major = rlb_get_u16(p + RRT_H_MAJOR);
	minor = rlb_get_u16(p + RRT_H_MINOR);
	if (major != RLB_TRACE_VERSION_MAJOR)
		return rlb_err_set(err, RLB_EVERSION,
				   "header at offset 16: unsupported trace version %u.%u (this reader supports %d.x)",
				   major, minor, RLB_TRACE_VERSION_MAJOR);
	if (len < RRT_H_SIZE ||
	    (minor <= RLB_TRACE_VERSION_MINOR && len != RRT_H_SIZE))
		return rlb_err_set(err, RLB_ECORRUPT,
				   "header at offset 4: content size %zu, expected %s%d for version %u.%u",
				   len, minor > RLB_TRACE_VERSION_MINOR ? "at least " : "",
				   RRT_H_SIZE, major, minor);
	stored = rlb_get_u32(p + len - 4);
	crc = rrt_crc32c(p, len - 4);
	if (stored != crc)
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
	if (get_name(p + RRT_H_SOURCE, 32, s->h.source, sizeof(s->h.source)) != 0)
		return rlb_err_set(err, RLB_ECORRUPT,
				   "header at offset %d: bad source field",
				   8 + RRT_H_SOURCE);
	ret = rrt_check_shape(&s->h, "header at offset 8", err);
	if (ret != 0)
		return ret == RLB_EUNSUPPORTED ? ret : RLB_ECORRUPT;
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
