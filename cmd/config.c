/*
 * config.c - `relibra config`: print the effective configuration (file,
 * presets and --set overrides applied) as YAML, or list the built-in
 * presets.
 */
#include <getopt.h>
#include <stdio.h>

#include "cmd.h"

static const char usage[] =
	"usage: relibra config [-h] [-c CONFIG] [--set KEY=VALUE]... [--presets]\n"
	"\n"
	"  -c, --config CONFIG  YAML config (default: built-in defaults)\n"
	"      --set KEY=VALUE  override one key, e.g. parallel.micro_batch_tokens=4096\n"
	"      --presets        list the built-in presets by kind\n"
	"  -h, --help           show this help\n";

static void list_presets(void)
{
	static const char *const kinds[] = { "models", "clusters", NULL };
	static const char *const titles[] = { "models", "clusters", "configs" };
	const char *const *names;
	int k, i;

	for (k = 0; k < 3; k++) {
		printf("%s:\n", titles[k]);
		names = rlb_config_preset_names(kinds[k]);
		for (i = 0; names[i]; i++)
			printf("  %s\n", names[i]);
	}
}

int cmd_config(int argc, char **argv)
{
	enum { OPT_SET = 256, OPT_PRESETS };
	static const struct option longopts[] = {
		{ "config", required_argument, NULL, 'c' },
		{ "set", required_argument, NULL, OPT_SET },
		{ "presets", no_argument, NULL, OPT_PRESETS },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	struct cmd_config_opts o = { NULL, NULL, 0 };
	struct rlb_config cfg;
	struct rlb_err err = { 0, "" };
	int c, presets = 0, rc = EXIT_FAIL;

	optind = 1;
	opterr = 0;
	while ((c = getopt_long(argc, argv, ":hc:", longopts, NULL)) != -1) {
		switch (c) {
		case 'h':
			fputs(usage, stdout);
			rc = EXIT_OK;
			goto out;
		case 'c':
			o.path = optarg;
			break;
		case OPT_SET:
			if (cmd_config_add_set(&o, optarg) < 0) {
				cmd_errorf("config", "out of memory");
				goto out;
			}
			break;
		case OPT_PRESETS:
			presets = 1;
			break;
		case ':':
			rc = cmd_usage_error("config", usage, "option '%s' needs a value",
					     argv[optind - 1]);
			goto out;
		default:
			rc = cmd_usage_error("config", usage, "unknown option '%s'",
					     argv[optind - 1]);
			goto out;
		}
	}
	if (optind < argc) {
		rc = cmd_usage_error("config", usage, "unexpected argument '%s'",
				     argv[optind]);
		goto out;
	}
	if (presets) {
		list_presets();
		rc = EXIT_OK;
		goto out;
	}
	if (cmd_config_load("config", &o, &cfg) < 0)
		goto out;
	if (rlb_config_write_yaml(&cfg, stdout, &err) < 0) {
		cmd_error("config", &err);
		goto out;
	}
	rc = EXIT_OK;
out:
	cmd_config_release(&o);
	return rc;
}
