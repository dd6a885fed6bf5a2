/*
 * common.c - helpers shared by the subcommands: error messages, the
 * options they all take, JSON output files, the progress line.
 */
#include <errno.h>
#include <getopt.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>

#include <jansson.h>

#include "cmd.h"

static int progress_drawn;
static uint64_t progress_last_ns;

void cmd_error(const char *name, const struct rlb_err *err)
{
	cmd_progress_done();
	fprintf(stderr, "relibra %s: %s\n", name,
		err && err->msg[0] ? err->msg : rlb_strerror(err ? err->code : 0));
}

void cmd_errorf(const char *name, const char *fmt, ...)
{
	va_list ap;

	cmd_progress_done();
	fprintf(stderr, "relibra %s: ", name);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

static int stdout_reported;

int cmd_flush_stdout(const char *name)
{
	int e;

	if (fflush(stdout) == 0) {
		if (!ferror(stdout))
			return 0;
		errno = EIO;	/* an earlier write failed; its errno is gone */
	}
	e = errno;
	if (!stdout_reported) {
		cmd_progress_done();
		fprintf(stderr, "relibra%s%s: cannot write to stdout: %s\n",
			name ? " " : "", name ? name : "", strerror(e));
	}
	stdout_reported = 1;
	return -1;
}

void cmd_stdout_error(const char *name, const struct rlb_err *err)
{
	if (!stdout_reported)
		cmd_error(name, err);
	stdout_reported = 1;
}

int cmd_usage_error(const char *name, const char *usage, const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "relibra %s: ", name);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, "\n%s", usage);
	return EXIT_USAGE;
}

int cmd_config_add_set(struct cmd_config_opts *o, const char *assignment)
{
	const char **n = realloc(o->sets, (o->nsets + 1) * sizeof(*n));

	if (!n)
		return -1;
	o->sets = n;
	o->sets[o->nsets++] = assignment;
	return 0;
}

int cmd_config_load(const char *name, const struct cmd_config_opts *o,
		    struct rlb_config *cfg)
{
	struct rlb_err err = {0};

	if (rlb_config_load(cfg, o->path, o->sets, o->nsets, &err) != 0) {
		cmd_error(name, &err);
		return -1;
	}
	return 0;
}

void cmd_config_release(struct cmd_config_opts *o)
{
	free(o->sets);
	o->sets = NULL;
	o->nsets = 0;
}

void cmd_warn_truncated(const char *name, struct rlb_trace_reader *r,
			const char *path, uint32_t lo, uint32_t hi)
{
	const uint32_t *steps;
	uint32_t last;
	size_t n;

	if (!rlb_trace_reader_truncated(r) || rlb_trace_reader_steps(r, &steps, &n, NULL) != 0 ||
	    n == 0)
		return;
	last = steps[n - 1];
	if (last < lo || last > hi)
		return;
	cmd_errorf(name, "warning: trace '%s' is truncated (its writer did not finish): "
		   "step %u, the last it holds, may lack sequences", path, last);
	if (n > 1 && steps[n - 2] >= lo)
		fprintf(stderr, "hint: --steps %u:%u leaves it out\n",
			lo > steps[0] ? lo : steps[0], steps[n - 2]);
}

/*
 * The error of getopt_long's '?'.  An unknown long option, or an
 * ambiguous abbreviation, sets optopt to 0, and optind is past it.  A
 * short one sets optopt to its letter, but inside a group of letters
 * ("-xh") optind stays on the group, so argv[optind - 1] is the argument
 * before it: name the letter.  A long option that takes no value, given
 * one ("--json=1"), sets optopt to its value too.
 */
static void unknown_opt(char **argv, struct rlb_err *err)
{
	const char *prev = argv[optind - 1], *cur = argv[optind];
	int in_group = cur && cur[0] == '-' && cur[1] && cur[1] != '-' &&
		       optopt > 0 && optopt < 256 && strchr(cur + 1, optopt);

	if (optopt == 0 && !strncmp(prev, "--", 2))
		rlb_err_set(err, RLB_EINVAL, "unknown option '%s'", prev);
	else if (!in_group && !strncmp(prev, "--", 2) && strchr(prev, '='))
		rlb_err_set(err, RLB_EINVAL, "option '%.*s' takes no value",
			    (int)(strchr(prev, '=') - prev), prev);
	else if (optopt > 0 && optopt < 256)
		rlb_err_set(err, RLB_EINVAL, "unknown option '-%c'", optopt);
	else
		rlb_err_set(err, RLB_EINVAL, "unknown option '%s'", prev);
}

int cmd_common_opt(const char *name, const char *usage, int c, char **argv,
		   struct cmd_config_opts *o, struct rlb_err *defer)
{
	struct rlb_err err = {0};

	switch (c) {
	case 'h':
		if (!defer)
			fputs(usage, stdout);
		return -1;
	case 'c':
		o->path = optarg;
		return 0;
	case CMD_OPT_SET:
		if (strchr(optarg, '=') && optarg[0] != '=') {
			if (cmd_config_add_set(o, optarg) == 0)
				return 0;
			rlb_err_set(&err, RLB_ENOMEM, "out of memory");
		} else {
			rlb_err_set(&err, RLB_EINVAL,
				    "--set '%s': expected KEY=VALUE, e.g. parallel.micro_batch_tokens=4096",
				    optarg);
		}
		break;
	case ':':
		rlb_err_set(&err, RLB_EINVAL, "option '%s' needs a value", argv[optind - 1]);
		break;
	default:
		unknown_opt(argv, &err);
		break;
	}
	if (defer)
		*defer = err;
	else if (err.code == RLB_EINVAL)
		cmd_usage_error(name, usage, "%s", err.msg);
	else
		cmd_error(name, &err);
	return err.code == RLB_EINVAL ? EXIT_USAGE : EXIT_FAIL;
}

void cmd_progress(void *ctx, uint64_t done, uint64_t total, const char *unit)
{
	uint64_t now;

	if (!isatty(STDERR_FILENO))
		return;
	now = rlb_now_ns();
	if (progress_drawn && now - progress_last_ns < 100000000u && done != total)
		return;
	progress_last_ns = now;
	if (total)
		fprintf(stderr, "\rrelibra %s: %llu/%llu %s (%.0f%%)\033[K",
			(const char *)ctx, (unsigned long long)done,
			(unsigned long long)total, unit, 100.0 * done / total);
	else
		fprintf(stderr, "\rrelibra %s: %llu %s\033[K", (const char *)ctx,
			(unsigned long long)done, unit);
	progress_drawn = 1;
}

void cmd_progress_done(void)
{
	if (progress_drawn) {
		fputs("\r\033[K", stderr);
		progress_drawn = 0;
	}
}

int cmd_parse_steps(const char *s, uint32_t *lo, uint32_t *hi,
		    struct rlb_err *err)
{
	const char *colon = strchr(s, ':');
	char buf[64], what[80];
	uint64_t v;

	*lo = 0;
	*hi = UINT32_MAX;
	if (!s[0] || !strcmp(s, ":"))
		return rlb_err_set(err, RLB_EPARSE,
				   "--steps '%s': expected A:B, A:, :B or A", s);
	if (strlen(s) >= sizeof(buf))
		return rlb_err_set(err, RLB_EPARSE, "bad --steps '%s'", s);
	strcpy(buf, s);
	snprintf(what, sizeof(what), "--steps '%s'", s);
	if (colon)
		buf[colon - s] = '\0';
	if (buf[0]) {
		if (rlb_parse_u64(buf, 0, UINT32_MAX, &v, what, err) != 0)
			return err ? err->code : RLB_EPARSE;
		*lo = (uint32_t)v;
	}
	if (!colon)
		*hi = *lo;
	else if (colon[1]) {
		if (rlb_parse_u64(colon + 1, 0, UINT32_MAX, &v, what, err) != 0)
			return err ? err->code : RLB_EPARSE;
		*hi = (uint32_t)v;
	}
	if (*lo > *hi)
		return rlb_err_set(err, RLB_ERANGE, "--steps '%s': the range is empty", s);
	return 0;
}

int cmd_json_sync(struct rlb_atomic_file *af, struct json_t *j,
		  struct rlb_err *err)
{
	if (json_dumpf(j, af->fp, JSON_INDENT(2) | JSON_PRESERVE_ORDER) != 0 ||
	    fputc('\n', af->fp) == EOF) {
		int ret = rlb_err_errno(err, RLB_EIO, "cannot write '%s'",
					rlb_atomic_name(af));

		rlb_atomic_abort(af);
		return ret;
	}
	return rlb_atomic_sync(af, err);
}

/*
 * P's directory (to its last '/', trailing slashes aside: "a/b/" is in
 * "a") into dir, or "" when P has none (the current directory); *base
 * and *blen: the last name.  -1 when the directory does not fit.
 */
static int path_split(const char *p, char *dir, size_t size,
		      const char **base, size_t *blen)
{
	size_t len = strlen(p), end;

	while (len > 1 && p[len - 1] == '/')
		len--;
	end = len;
	while (len > 0 && p[len - 1] != '/')
		len--;
	*base = p + len;
	*blen = end - len;
	if (len == 0) {
		dir[0] = '\0';
		return 0;
	}
	if (len > 1)
		len--;		/* "/x" is in "/" */
	if (len >= size)
		return -1;
	memcpy(dir, p, len);
	dir[len] = '\0';
	return 0;
}

/*
 * Whether paths a and b name one file: the same text or the same inode;
 * with NEW, two outputs, also the same name in the same directory when
 * one does not exist yet ("x.rlp" and "./x.rlp").  An input that does not
 * exist (stdin, a built-in config) is nothing to write over.
 */
static int same_file(const char *a, const char *b, int new)
{
	char da[4096], db[4096];
	const char *ba, *bb;
	size_t la, lb;
	struct stat sa, sb;
	int ha, hb;

	if (!strcmp(a, b))
		return 1;
	ha = stat(a, &sa) == 0;
	if (!ha && errno != ENOENT)
		return 0;
	hb = stat(b, &sb) == 0;
	if (!hb && errno != ENOENT)
		return 0;
	if (ha && hb)
		return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
	if (!new || path_split(a, da, sizeof(da), &ba, &la) != 0 ||
	    path_split(b, db, sizeof(db), &bb, &lb) != 0 ||
	    la != lb || memcmp(ba, bb, la) != 0)
		return 0;
	return stat(*da ? da : ".", &sa) == 0 && stat(*db ? db : ".", &sb) == 0 &&
	       sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

int cmd_same_input(const char *a, const char *b)
{
	return same_file(a, b, 0);
}

const char *cmd_input_path(const char *path)
{
	return strcmp(path, "-") ? path : "/dev/stdin";
}

int cmd_same_output(const char *a, const char *b)
{
	return same_file(a, b, 1);
}

int cmd_check_outputs(const char *name, const char *usage,
		      const struct cmd_path *in, size_t nin,
		      const struct cmd_path *out, size_t nout, int stdout_ok)
{
	const struct cmd_path *also = NULL;
	size_t i, j;

	for (i = 0; i < nout && !also; i++) {
		const char *p = out[i].path;

		if (!p)
			continue;
		if (!strcmp(p, "-")) {
			if (stdout_ok)
				continue;
			return usage ? cmd_usage_error(name, usage,
						       "%s '-': this output goes to a file",
						       out[i].what) : EXIT_USAGE;
		}
		if (!*p)
			return usage ? cmd_usage_error(name, usage, "%s: an empty path",
						       out[i].what) : EXIT_USAGE;
		for (j = 0; j < nin && !also; j++)
			if (in[j].path && same_file(p, in[j].path, 0))
				also = &in[j];
		for (j = 0; j < i && !also; j++)
			if (out[j].path && same_file(p, out[j].path, 1))
				also = &out[j];
	}
	if (also) {
		i--;
		return usage ? cmd_usage_error(name, usage, "%s '%s' is also %s: choose another path",
					       out[i].what, out[i].path, also->what) : EXIT_USAGE;
	}
	/* what would make the output fail only after the work */
	for (i = 0; i < nout; i++) {
		const char *p = out[i].path, *base;
		char dir[4096];
		struct stat st;
		size_t len;

		if (!p || !strcmp(p, "-"))
			continue;
		if (out[i].kind != CMD_OUT_DIR && p[strlen(p) - 1] == '/') {
			if (usage)
				cmd_errorf(name, "%s '%s' names a directory", out[i].what, p);
			return EXIT_FAIL;
		}
		if (out[i].kind != CMD_OUT_DIR && stat(p, &st) == 0 && S_ISDIR(st.st_mode)) {
			if (usage)
				cmd_errorf(name, "%s '%s' is a directory", out[i].what, p);
			return EXIT_FAIL;
		}
		if (out[i].kind == CMD_OUT_DIR && stat(p, &st) == 0 && !S_ISDIR(st.st_mode)) {
			if (usage)
				cmd_errorf(name, "%s '%s' is not a directory", out[i].what, p);
			return EXIT_FAIL;
		}
		if (out[i].kind == CMD_OUT_REGULAR && stat(p, &st) == 0 &&
		    !S_ISREG(st.st_mode)) {
			if (usage)
				cmd_errorf(name, "%s '%s' is not a regular file (it is read back once written)",
					   out[i].what, p);
			return EXIT_FAIL;
		}
		if (path_split(p, dir, sizeof(dir), &base, &len) != 0 || !*dir)
			continue;
		if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
			if (usage)
				cmd_errorf(name, "%s '%s': no directory '%s'", out[i].what, p, dir);
			return EXIT_FAIL;
		}
	}
	return 0;
}

int cmd_gemm_mode(enum rlb_gemm_mode *mode, struct rlb_err *err)
{
	const char *v = getenv("RLB_CUDA_GEMM");

	*mode = RLB_GEMM_GROUPED;
	if (!v || !*v || rlb_gemm_mode_from_name(v, mode, err) == 0)
		return 0;
	rlb_err_prefix(err, "RLB_CUDA_GEMM");
	return err->code;
}
