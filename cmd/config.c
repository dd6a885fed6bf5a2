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
	"  -c, --config CONFIG  YAML config (default: the built-in defaults,\n"
	"                       which need the model keys from --set)\n"
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
	enum { OPT_PRESETS = CMD_OPT_SET + 1 };
	static const struct option longopts[] = {
		CMD_COMMON_LONGOPTS,
		{ "presets", no_argument, NULL, OPT_PRESETS },
		{ NULL, 0, NULL, 0 },
	};
	struct cmd_config_opts o = { NULL, NULL, 0 };
	struct rlb_config cfg;
	struct rlb_err err = { 0, "" };
	int c, ret, presets = 0, rc = EXIT_FAIL;

	optind = 1;
	opterr = 0;
	while ((c = getopt_long(argc, argv, ":hc:", longopts, NULL)) != -1) {
		switch (c) {
		case OPT_PRESETS:
			presets = 1;
			break;
		default:
			ret = cmd_common_opt("config", usage, c, argv, &o, NULL);
			if (ret) {
				rc = ret < 0 ? EXIT_OK : ret;
				goto out;
			}
			break;
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
		cmd_stdout_error("config", &err);
		goto out;
	}
	rc = EXIT_OK;
out:
	cmd_config_release(&o);
	return rc;
}
