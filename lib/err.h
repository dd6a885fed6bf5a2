/*
 * err.h - error codes and the error report carried through librelibra.
 *
 * Every lib function returns 0 on success or a negative RLB_E* code, and
 * fills an optional struct rlb_err with the code and a one-line message.
 */
#ifndef RLB_ERR_H
#define RLB_ERR_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

enum rlb_errcode {
	RLB_OK = 0,
	RLB_ENOMEM = -1,	/* allocation failed */
	RLB_EIO = -2,		/* operating system I/O error */
	RLB_EPARSE = -3,	/* malformed input (JSON, npy, numbers) */
	RLB_ECONFIG = -4,	/* invalid configuration */
	RLB_EINVAL = -5,	/* invalid argument from the caller */
	RLB_ECORRUPT = -6,	/* corrupt binary data (trace, plan) */
	RLB_ETRUNC = -7,	/* binary data ends early */
	RLB_EVERSION = -8,	/* unsupported format version */
	RLB_ERANGE = -9,	/* value out of the allowed range */
	RLB_ENOTFOUND = -10,	/* named thing does not exist */
	RLB_EMISMATCH = -11,	/* inputs do not belong together */
	RLB_EUNSUPPORTED = -12,	/* feature not built in or not supported */
	RLB_EMPI = -13,		/* MPI failure */
	RLB_ECUDA = -14,	/* CUDA failure */
	RLB_ENCCL = -15,	/* NCCL failure */
	RLB_EZSTD = -16,	/* zstd failure */
};

#define RLB_ERR_MSG_MAX 1024

struct rlb_err {
	int code;
	char msg[RLB_ERR_MSG_MAX];
};

/* Reset an error report to "no error". NULL is a no-op. */
void rlb_err_clear(struct rlb_err *err);

/*
 * Record an error and return its code, so that callers can write
 * `return rlb_err_set(err, RLB_EPARSE, "bad '%s'", x);`.  err may be NULL.
 * The message is printf-formatted, lowercase, without a trailing period.
 */
int rlb_err_set(struct rlb_err *err, int code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* Like rlb_err_set, with ": <strerror(errno)>" appended (errno read first). */
int rlb_err_errno(struct rlb_err *err, int code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/*
 * Prefix the message already in err with "<prefix>: " (printf-formatted).
 * Returns err->code (or code 0 when err is NULL).
 */
int rlb_err_prefix(struct rlb_err *err, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/* Short name of a code ("corrupt data", "out of memory", ...). */
const char *rlb_strerror(int code);

#ifdef __cplusplus
}
#endif

#endif
