/*
 * err.c - error reports: formatting and code names.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "err.h"

void rlb_err_clear(struct rlb_err *err)
{
	if (!err)
		return;
	err->code = 0;
	err->msg[0] = '\0';
}

int rlb_err_set(struct rlb_err *err, int code, const char *fmt, ...)
{
	va_list ap;

	if (!err)
		return code;
	err->code = code;
	va_start(ap, fmt);
	vsnprintf(err->msg, sizeof(err->msg), fmt, ap);
	va_end(ap);
	return code;
}

int rlb_err_errno(struct rlb_err *err, int code, const char *fmt, ...)
{
	int saved = errno;
	va_list ap;
	size_t n;

	if (!err)
		return code;
	err->code = code;
	va_start(ap, fmt);
	vsnprintf(err->msg, sizeof(err->msg), fmt, ap);
	va_end(ap);
	n = strlen(err->msg);
	snprintf(err->msg + n, sizeof(err->msg) - n, ": %s", strerror(saved));
	return code;
}

int rlb_err_prefix(struct rlb_err *err, const char *fmt, ...)
{
	char prefix[RLB_ERR_MSG_MAX], old[RLB_ERR_MSG_MAX];
	va_list ap;
	size_t n;

	if (!err)
		return 0;
	va_start(ap, fmt);
	vsnprintf(prefix, sizeof(prefix), fmt, ap);
	va_end(ap);
	memcpy(old, err->msg, sizeof(old));
	n = strlen(prefix);
	if (n > sizeof(err->msg) - 3)
		n = sizeof(err->msg) - 3;
	memcpy(err->msg, prefix, n);
	memcpy(err->msg + n, ": ", 2);
	n += 2;
	memcpy(err->msg + n, old, strnlen(old, sizeof(err->msg) - n - 1));
	err->msg[n + strnlen(old, sizeof(err->msg) - n - 1)] = '\0';
	return err->code;
}

const char *rlb_strerror(int code)
{
	switch (code) {
	case RLB_OK: return "success";
	case RLB_ENOMEM: return "out of memory";
	case RLB_EIO: return "input/output error";
	case RLB_EPARSE: return "parse error";
	case RLB_ECONFIG: return "invalid configuration";
	case RLB_EINVAL: return "invalid argument";
	case RLB_ECORRUPT: return "corrupt data";
	case RLB_ETRUNC: return "truncated data";
	case RLB_EVERSION: return "unsupported version";
	case RLB_ERANGE: return "value out of range";
	case RLB_ENOTFOUND: return "not found";
	case RLB_EMISMATCH: return "mismatched inputs";
	case RLB_EUNSUPPORTED: return "not supported";
	case RLB_EMPI: return "MPI error";
	case RLB_ECUDA: return "CUDA error";
	case RLB_ENCCL: return "NCCL error";
	case RLB_EZSTD: return "zstd error";
	}
	return "unknown error";
}
