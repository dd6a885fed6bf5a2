/*
 * sniff.c - what a file given where another kind is expected seems to
 * be (sniff.h): relibra's own binary and JSON files, a Hugging Face
 * config.json, a YAML config, a .npy array, compressed and UTF-16 files.
 */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sniff.h"
#include "trace_impl.h"
#include "util.h"

/* The JSON key KEY ("\"schema\"") in b[0..n), or NULL. */
static const uint8_t *find_key(const uint8_t *b, size_t n, const char *key)
{
	size_t kl = strlen(key), i;

	for (i = 0; i + kl <= n; i++) {
		size_t j = i + kl;

		if (memcmp(b + i, key, kl))
			continue;
		while (j < n && isspace(b[j]))
			j++;
		if (j < n && b[j] == ':')
			return b + j + 1;
	}
	return NULL;
}

/* Whether the string value at p (after a key's ':') starts with PREFIX. */
static int value_is(const uint8_t *p, const uint8_t *end, const char *prefix)
{
	size_t pl = strlen(prefix);

	while (p < end && isspace(*p))
		p++;
	return p < end && *p == '"' && (size_t)(end - p - 1) >= pl &&
	       !memcmp(p + 1, prefix, pl);
}

static enum rlb_kind sniff_json(const uint8_t *b, size_t n)
{
	const uint8_t *v = find_key(b, n, "\"schema\"");

	if (v && value_is(v, b + n, "relibra.result/"))
		return RLB_KIND_RESULT;
	if (v && value_is(v, b + n, "relibra.schedule/"))
		return RLB_KIND_SCHEDULE;
	if (v && value_is(v, b + n, "relibra.eplb-export/"))
		return RLB_KIND_EPLB_EXPORT;
	if (!v && (find_key(b, n, "\"model_type\"") || find_key(b, n, "\"architectures\"")))
		return RLB_KIND_HF_CONFIG;
	return RLB_KIND_UNKNOWN;
}

/* A line that starts with one of a config's top-level keys. */
static enum rlb_kind sniff_yaml(const uint8_t *b, size_t n)
{
	static const char *const keys[] = {
		"model:", "cluster:", "parallel:", "workload:", "balancer:", "preset:",
	};
	size_t i, k;

	if (memchr(b, '\0', n))
		return RLB_KIND_UNKNOWN;
	for (i = 0; i < n; i++) {
		if (i && b[i - 1] != '\n')
			continue;
		for (k = 0; k < sizeof(keys) / sizeof(keys[0]); k++) {
			size_t kl = strlen(keys[k]);

			if (n - i >= kl && !memcmp(b + i, keys[k], kl))
				return RLB_KIND_YAML_CONFIG;
		}
	}
	return RLB_KIND_UNKNOWN;
}

int rlb_sniff_bom(const uint8_t *b, size_t n)
{
	return n >= 3 && b[0] == 0xef && b[1] == 0xbb && b[2] == 0xbf;
}

enum rlb_kind rlb_sniff(const uint8_t *b, size_t n)
{
	size_t i;

	if (n >= 8 && rlb_get_u32(b) == RRT_HEADER_MAGIC) {
		/* a file cut inside the identifier is named by the part present
		 * when that part tells the two apart ("RLBT" or "RLBP" onwards) */
		size_t id = n < 16 ? n - 8 : 8;
		int trace = !memcmp(b + 8, RRT_HEADER_ID, id);

		if (trace == !memcmp(b + 8, RLP_HEADER_ID, id))
			return RLB_KIND_UNKNOWN;
		return trace ? RLB_KIND_TRACE : RLB_KIND_PLAN;
	}
	if (n >= 2 && b[0] == 0x1f && b[1] == 0x8b)
		return RLB_KIND_GZIP;
	if (n >= 4 && !memcmp(b, "PK\x03\x04", 4))
		return RLB_KIND_ZIP;
	if (n >= 2 && b[0] == 0x80 && b[1] >= 2 && b[1] <= 5)	/* PROTO 2-5 */
		return RLB_KIND_PICKLE;
	if (n >= 4 && !memcmp(b, "\x28\xb5\x2f\xfd", 4))
		return RLB_KIND_ZSTD;
	if (n >= 6 && !memcmp(b, "\x93NUMPY", 6))
		return RLB_KIND_NPY;
	if (n >= 2 && ((b[0] == 0xff && b[1] == 0xfe) || (b[0] == 0xfe && b[1] == 0xff)))
		return RLB_KIND_UTF16;
	/* UTF-16 without a byte order mark: ASCII with every other byte NUL */
	if (n >= 4 && ((b[0] && !b[1] && b[2] && !b[3]) || (!b[0] && b[1] && !b[2] && b[3])))
		return RLB_KIND_UTF16;
	if (rlb_sniff_bom(b, n)) {
		b += 3;
		n -= 3;
	}
	for (i = 0; i < n && isspace(b[i]); i++)
		;
	if (i < n && b[i] == '{')
		return sniff_json(b + i, n - i);
	return sniff_yaml(b, n);
}

/* Up to RLB_SNIFF_BYTES of the regular file FD at offset 0 into b; the count. */
static size_t head_fd(int fd, uint8_t *b)
{
	struct stat st;
	size_t n = 0;

	if (fd < 0 || fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))
		return 0;
	while (n < RLB_SNIFF_BYTES) {
		ssize_t got = pread(fd, b + n, RLB_SNIFF_BYTES - n, (off_t)n);

		if (got < 0 && errno == EINTR)
			continue;
		if (got <= 0)
			break;
		n += (size_t)got;
	}
	return n;
}

enum rlb_kind rlb_sniff_fd(int fd)
{
	uint8_t b[RLB_SNIFF_BYTES];

	return rlb_sniff(b, head_fd(fd, b));
}

enum rlb_kind rlb_sniff_path(const char *path)
{
	int fd = open(path, O_RDONLY | O_NONBLOCK);
	enum rlb_kind k;

	if (fd < 0)
		return RLB_KIND_UNKNOWN;
	k = rlb_sniff_fd(fd);
	close(fd);
	return k;
}

const char *rlb_kind_name(enum rlb_kind k)
{
	switch (k) {
	case RLB_KIND_TRACE: return "a relibra trace";
	case RLB_KIND_PLAN: return "a relibra plan";
	case RLB_KIND_RESULT:
		return "a relibra result (the JSON of plan --summary or train-step -o)";
	case RLB_KIND_SCHEDULE: return "a schedule (relibra.schedule/1 JSON)";
	case RLB_KIND_EPLB_EXPORT: return "an EPLB export (the JSON of plan --eplb-export)";
	case RLB_KIND_HF_CONFIG: return "a Hugging Face config.json";
	case RLB_KIND_YAML_CONFIG: return "a relibra YAML config";
	case RLB_KIND_NPY: return "a .npy array";
	case RLB_KIND_GZIP: return "gzip-compressed";
	case RLB_KIND_ZSTD: return "zstd-compressed";
	case RLB_KIND_UTF16: return "UTF-16 text";
	case RLB_KIND_ZIP: return "a zip archive, such as a torch.save or numpy.savez file";
	case RLB_KIND_PICKLE: return "a Python pickle, such as a legacy torch.save file";
	default: return NULL;
	}
}

const char *rlb_kind_hint(enum rlb_kind k)
{
	switch (k) {
	case RLB_KIND_GZIP:
	case RLB_KIND_ZSTD: return ": decompress it first";
	case RLB_KIND_UTF16: return ": convert it to UTF-8";
	default: return "";
	}
}

int rlb_kind_err(struct rlb_err *err, int code, enum rlb_kind k, enum rlb_kind self,
		 const char *path, const char *want, const char *hint)
{
	if (k == RLB_KIND_UNKNOWN || k == self)
		return 0;
	return rlb_err_set(err, code, "'%s' is %s, not %s%s", path, rlb_kind_name(k), want,
			   hint ? hint : rlb_kind_hint(k));
}

int rlb_kind_err_fd(struct rlb_err *err, int code, int fd, int json, enum rlb_kind self,
		    const char *path, const char *want, const char *hint)
{
	uint8_t b[RLB_SNIFF_BYTES];
	size_t n = head_fd(fd, b);

	if (json && rlb_sniff_bom(b, n))
		return rlb_err_set(err, code,
				   "'%s' starts with a UTF-8 byte order mark (bytes 0-2), which JSON "
				   "does not allow: save it without one", path);
	return rlb_kind_err(err, code, rlb_sniff(b, n), self, path, want, hint);
}
