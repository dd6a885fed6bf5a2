/*
 * cmd.h - the subcommands of the relibra CLI and the helpers they share
 * (error printing, config options, JSON output files, progress line).
 */
#ifndef RLB_CMD_H
#define RLB_CMD_H

#include <stddef.h>

#include "backend.h"
#include "relibra.h"

struct json_t;			/* jansson's json_t */

/* Exit statuses (man/relibra.1, EXIT STATUS). */
enum {
	EXIT_OK = 0,
	EXIT_FAIL = 1,
	EXIT_USAGE = 2,
};

int cmd_capture(int argc, char **argv);
int cmd_inspect(int argc, char **argv);
int cmd_config(int argc, char **argv);
int cmd_plan(int argc, char **argv);
int cmd_train_step(int argc, char **argv);
int cmd_report(int argc, char **argv);
int cmd_calibrate(int argc, char **argv);

/* "relibra NAME: message" on stderr. */
void cmd_error(const char *name, const struct rlb_err *err);
void cmd_errorf(const char *name, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/*
 * Flush stdout: 0, or -1 when it or an earlier write to it failed, said
 * once on stderr ("relibra NAME: cannot write to stdout: REASON"; NULL
 * NAME for relibra itself).
 */
int cmd_flush_stdout(const char *name);
/* Say that a write to stdout failed (err), once: as cmd_flush_stdout. */
void cmd_stdout_error(const char *name, const struct rlb_err *err);

/* Print a usage error, the usage string, and return EXIT_USAGE. */
int cmd_usage_error(const char *name, const char *usage, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* The -c FILE and --set KEY=VALUE options every subcommand takes. */
struct cmd_config_opts {
	const char *path;
	const char **sets;
	size_t nsets;
};

/* Record one --set; returns -1 on allocation failure. */
int cmd_config_add_set(struct cmd_config_opts *o, const char *assignment);
/* Load the config (path may be NULL: defaults); prints the error on failure. */
int cmd_config_load(const char *name, const struct cmd_config_opts *o,
		    struct rlb_config *cfg);
void cmd_config_release(struct cmd_config_opts *o);

/* getopt_long's value for --set; a subcommand numbers its own from here + 1. */
enum { CMD_OPT_SET = 256 };

/* -h, -c and --set: the first entries of every subcommand's longopts. */
#define CMD_COMMON_LONGOPTS					\
	{ "help", no_argument, NULL, 'h' },			\
	{ "config", required_argument, NULL, 'c' },		\
	{ "set", required_argument, NULL, CMD_OPT_SET }

/*
 * The default branch of a subcommand's getopt_long switch (optstring
 * ":hc:..."): -h, -c, --set, a missing value and an unknown option.
 * 0 after -c or --set; otherwise what parse_args returns: -1 after printing
 * the usage (-h), EXIT_FAIL when out of memory, EXIT_USAGE after the usage
 * error.  With DEFER (train-step under a launcher) nothing is printed: the
 * error goes to *DEFER (code RLB_EINVAL for a usage error).
 */
int cmd_common_opt(const char *name, const char *usage, int c, char **argv,
		   struct cmd_config_opts *o, struct rlb_err *defer);

/*
 * Parse a --steps range "A:B", "A:", ":B" or "A" into [*lo, *hi]
 * (open ends: 0 and UINT32_MAX).  RLB_EPARSE / RLB_ERANGE with a message.
 */
int cmd_parse_steps(const char *s, uint32_t *lo, uint32_t *hi,
		    struct rlb_err *err);

/*
 * A warning on stderr when the trace is truncated (its writer did not
 * finish) and its last step, which may lack sequences, is in lo..hi.
 */
void cmd_warn_truncated(const char *name, struct rlb_trace_reader *r,
			const char *path, uint32_t lo, uint32_t hi);

/* "s" unless n is 1: "%u step%s", n, cmd_s(n). */
static inline const char *cmd_s(uint64_t n)
{
	return n == 1 ? "" : "s";
}

/*
 * Write j as indented JSON into the open af and rlb_atomic_sync it, for a
 * command that renames all its outputs at the end (rlb_atomic_commit).
 * On failure af is removed and released.
 */
int cmd_json_sync(struct rlb_atomic_file *af, struct json_t *j,
		  struct rlb_err *err);

/* A file a command reads or writes, and what it is ("the trace", "-o"). */
/* What an output must be (struct cmd_path's kind; 0 for inputs). */
enum {
	CMD_OUT_FILE,		/* a file, or a device or FIFO written in place */
	CMD_OUT_DIR,		/* a directory (report --svg) */
	CMD_OUT_REGULAR,	/* a regular file: read back once written */
};

struct cmd_path {
	const char *what;
	const char *path;	/* NULL: not given */
	int kind;		/* outputs: CMD_OUT_* */
};

/*
 * Checks of a command's outputs before any work.  Usage errors
 * (EXIT_USAGE): an output is empty, is "-" (stdout) unless stdout_ok, or
 * names one of the inputs or another output (the same path or the same
 * file; for two outputs also a file not there yet under another spelling
 * of its directory, "x.rlp" and "./x.rlp").  Failures (EXIT_FAIL): an
 * output file is or names (a trailing '/') a directory, a CMD_OUT_REGULAR
 * one exists and is not a regular file, a CMD_OUT_DIR one exists and is
 * not a directory, or its directory does not exist.
 * Reported unless usage is NULL (train-step's ranks but the first).
 */
int cmd_check_outputs(const char *name, const char *usage,
		      const struct cmd_path *in, size_t nin,
		      const struct cmd_path *out, size_t nout, int stdout_ok);

/*
 * Whether paths a and b name one existing file: the same text or the
 * same inode (an input given twice, as "x.json" and "./x.json").
 */
int cmd_same_input(const char *a, const char *b);
/* An input path to compare with others: '-' is the file stdin reads, /dev/stdin. */
const char *cmd_input_path(const char *path);

/*
 * Whether paths a and b name one file once written: as cmd_same_input,
 * and also the same name in the same directory when one does not exist yet.
 */
int cmd_same_output(const char *a, const char *b);

/*
 * Progress callback for lib (rlb_progress_fn): a single updating line on
 * stderr, only when stderr is a terminal.  ctx is the subcommand name.
 */
void cmd_progress(void *ctx, uint64_t done, uint64_t total, const char *unit);
/* Clear the progress line if one was drawn. */
void cmd_progress_done(void);

/*
 * The cuda backend's GEMM strategy from RLB_CUDA_GEMM (relibra(1),
 * ENVIRONMENT): grouped when it is unset or empty; RLB_EINVAL naming the
 * variable when it is neither grouped nor loop.
 */
int cmd_gemm_mode(enum rlb_gemm_mode *mode, struct rlb_err *err);

#endif
