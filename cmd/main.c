/*
 * main.c - relibra's entry point: global options and the command table.
 */
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>

#include "cmd.h"

struct command {
	const char *name;
	int (*fn)(int argc, char **argv);
	const char *summary;
};

static const struct command commands[] = {
	{ "capture", cmd_capture, "record routing into a trace (.rrt)" },
	{ "inspect", cmd_inspect, "print a trace's header, contents, integrity and load statistics" },
	{ "plan", cmd_plan, "plan placement and replication, simulate the step time" },
	{ "train-step", cmd_train_step, "run training steps that apply a plan (mpirun or --virtual-ranks)" },
	{ "report", cmd_report, "compare results in tables, CSV, JSON, SVG charts and HTML" },
	{ "calibrate", cmd_calibrate, "measure the GPU's expert GEMMs and NVLink, fit the cost model" },
	{ "config", cmd_config, "print the effective configuration as YAML" },
};

#define NCOMMANDS (sizeof(commands) / sizeof(commands[0]))

static void usage(FILE *fp)
{
	size_t i;

	fprintf(fp, "usage: relibra [-hV] <command> [options] [args]\n\ncommands:\n");
	for (i = 0; i < NCOMMANDS; i++)
		fprintf(fp, "  %-10s %s\n", commands[i].name, commands[i].summary);
	fprintf(fp, "\n'relibra help <command>' or 'relibra <command> -h' for a command's options;\n"
		    "man relibra for everything.\n");
}

static void version(void)
{
	printf("relibra %s\n", rlb_version());
	printf("backends: cpu%s\n", RLB_BUILD_CUDA ? " cuda" : "");
	printf("trace format: %d.%d\n", RLB_TRACE_VERSION_MAJOR,
	       RLB_TRACE_VERSION_MINOR);
	printf("plan format: %d.%d\n", RLB_PLAN_VERSION_MAJOR,
	       RLB_PLAN_VERSION_MINOR);
}

static const struct command *find(const char *name)
{
	size_t i;

	for (i = 0; i < NCOMMANDS; i++)
		if (strcmp(commands[i].name, name) == 0)
			return &commands[i];
	return NULL;
}

/*
 * A stopped run (Ctrl-C, kill, mpirun ending the job) removes its
 * half-written outputs (every open PATH.tmp), then dies of the signal.
 * A signal ignored when relibra starts (nohup) is left ignored.
 */
static void on_signal(int sig)
{
	rlb_atomic_remove_all();
	signal(sig, SIG_DFL);
	raise(sig);
}

static void catch_signals(void)
{
	static const int sigs[] = { SIGINT, SIGTERM, SIGHUP };
	struct sigaction sa;
	size_t i;

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_signal;
	sigemptyset(&sa.sa_mask);
	for (i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++) {
		struct sigaction old;

		/* ignored on entry (nohup, a script's background job): stays so */
		if (sigaction(sigs[i], NULL, &old) == 0 && old.sa_handler == SIG_IGN)
			continue;
		sigaction(sigs[i], &sa, NULL);
	}
}

/*
 * A command that printed to stdout and returns success checks that it all
 * reached the file: a full disk must not pass for a complete output.
 */
static int finish(const char *name, int ret)
{
	if (cmd_flush_stdout(name) != 0 && ret == EXIT_OK)
		ret = EXIT_FAIL;
	return ret;
}

/*
 * The soft limit of open files raised to the hard one (at most 65536): an
 * output holds a descriptor until it is renamed into place with the
 * others (util.h), and `report --svg` writes five charts per group.
 */
static void raise_nofile(void)
{
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur >= rl.rlim_max ||
	    rl.rlim_cur >= 65536)
		return;
	rl.rlim_cur = rl.rlim_max < 65536 ? rl.rlim_max : 65536;
	(void)setrlimit(RLIMIT_NOFILE, &rl);
}

int main(int argc, char **argv)
{
	const struct command *c;
	int help;

	raise_nofile();
	if (argc < 2) {
		usage(stderr);
		return EXIT_USAGE;
	}
	help = !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help");
	if (help || !strcmp(argv[1], "-V") || !strcmp(argv[1], "--version")) {
		if (argc > 2) {
			fprintf(stderr, "relibra: %s takes no argument (got '%s')\n",
				argv[1], argv[2]);
			usage(stderr);
			return EXIT_USAGE;
		}
		if (help)
			usage(stdout);
		else
			version();
		return finish(NULL, EXIT_OK);
	}
	if (!strcmp(argv[1], "help")) {
		char *hargv[] = { NULL, "-h", NULL };

		if (argc < 3 || (argc == 3 && !strcmp(argv[2], "help"))) {
			usage(stdout);
			return finish(NULL, EXIT_OK);
		}
		c = find(argv[2]);
		if (!c) {
			fprintf(stderr, "relibra: unknown command '%s'\n", argv[2]);
			usage(stderr);
			return EXIT_USAGE;
		}
		if (argc > 3) {
			fprintf(stderr, "relibra: help takes one command (got '%s')\n", argv[3]);
			usage(stderr);
			return EXIT_USAGE;
		}
		hargv[0] = argv[2];
		return finish(c->name, c->fn(2, hargv));
	}
	if (argv[1][0] == '-') {
		fprintf(stderr, "relibra: unknown option '%s'\n", argv[1]);
		usage(stderr);
		return EXIT_USAGE;
	}
	c = find(argv[1]);
	if (!c) {
		fprintf(stderr, "relibra: unknown command '%s'\n", argv[1]);
		usage(stderr);
		return EXIT_USAGE;
	}
	catch_signals();
	return finish(c->name, c->fn(argc - 1, argv + 1));
}
