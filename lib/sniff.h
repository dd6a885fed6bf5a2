/*
 * sniff.h - what a file given where another kind is expected seems to be,
 * from its first bytes, so that a message names the whole file ("'p.rlp'
 * is a relibra plan, not a schedule") instead of the first byte that
 * fails to parse as the kind expected.
 */
#ifndef RLB_SNIFF_H
#define RLB_SNIFF_H

#include <stddef.h>
#include <stdint.h>

#include "err.h"

enum rlb_kind {
	RLB_KIND_UNKNOWN,
	RLB_KIND_TRACE,		/* .rrt */
	RLB_KIND_PLAN,		/* .rlp */
	RLB_KIND_RESULT,	/* relibra.result JSON (plan --summary, train-step -o) */
	RLB_KIND_SCHEDULE,	/* relibra.schedule JSON (inspect --schedule) */
	RLB_KIND_EPLB_EXPORT,	/* relibra.eplb-export JSON (plan --eplb-export) */
	RLB_KIND_HF_CONFIG,	/* a JSON object with "model_type" or "architectures" */
	RLB_KIND_YAML_CONFIG,	/* text with a line that starts "model:", "preset:"... */
	RLB_KIND_NPY,
	RLB_KIND_GZIP,
	RLB_KIND_ZSTD,
	RLB_KIND_UTF16,
	RLB_KIND_ZIP,		/* torch.save, numpy.savez */
	RLB_KIND_PICKLE,	/* pickle.dump, legacy torch.save */
};

/* Bytes that rlb_sniff_fd and rlb_sniff_path look at. */
#define RLB_SNIFF_BYTES 4096

/* The kind of a file that starts with b[0..n); a UTF-8 byte order mark is skipped. */
enum rlb_kind rlb_sniff(const uint8_t *b, size_t n);
/* The same for the regular file open as FD (read with pread: nothing is consumed). */
enum rlb_kind rlb_sniff_fd(int fd);
/* The same for the regular file PATH; UNKNOWN for anything else (a FIFO is not opened). */
enum rlb_kind rlb_sniff_path(const char *path);
/* Whether b[0..n) starts with a UTF-8 byte order mark, which JSON may not. */
int rlb_sniff_bom(const uint8_t *b, size_t n);

/* "a relibra trace", "gzip-compressed"...; NULL for UNKNOWN. */
const char *rlb_kind_name(enum rlb_kind k);
/* What to do about a file of kind K wherever it is given: ": decompress it first", or "". */
const char *rlb_kind_hint(enum rlb_kind k);

/*
 * When K is known and not SELF: "'PATH' is <K>, not WANT" and HINT
 * (NULL: the kind's own, such as ": decompress it first") as ERR with
 * CODE, returned.  Else 0, ERR untouched.
 */
int rlb_kind_err(struct rlb_err *err, int code, enum rlb_kind k, enum rlb_kind self,
		 const char *path, const char *want, const char *hint);
/*
 * rlb_kind_err for the regular file open as FD, first checking for a
 * byte order mark when the file is to be JSON (JSON true).
 */
int rlb_kind_err_fd(struct rlb_err *err, int code, int fd, int json, enum rlb_kind self,
		    const char *path, const char *want, const char *hint);

#endif
