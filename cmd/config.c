/*
 * config.c - `relibra config`: print the effective configuration (file,
 * presets and --set overrides applied) as YAML, list the built-in
 * presets, or write a model preset from a Hugging Face config.json.
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmd.h"

static const char usage[] =
	"usage: relibra config [-h] [-c CONFIG] [--set KEY=VALUE]...\n"
	"       relibra config --presets\n"
	"       relibra config --from-hf CONFIG.json [--name NAME] [-o FILE]\n"
	"\n"
	"  -c, --config CONFIG  YAML config (default: the built-in defaults,\n"
	"                       which need the model keys from --set)\n"
	"      --set KEY=VALUE  override one key, e.g. parallel.micro_batch_tokens=4096\n"
	"      --presets        list the built-in presets by kind\n"
	"      --from-hf FILE   write a model preset from a Hugging Face config.json\n"
	"                       (- reads standard input); keep it as models/NAME.yaml\n"
	"                       beside a config and use model: {preset: NAME}\n"
	"      --name NAME      the preset's model name (default: the model's\n"
	"                       _name_or_path after its last '/', or model_type)\n"
	"  -o, --output FILE    write the preset to FILE instead of stdout\n"
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

/* --from-hf: the model preset of a config.json, to OUT (NULL: stdout). */
static int from_hf(const char *in, const char *name, const char *out)
{
	const struct cmd_path inp[] = { { "--from-hf", in, 0 } };
	const struct cmd_path outp[] = { { "-o", out, CMD_OUT_FILE } };
	struct rlb_atomic_file af = { .slot = -1 };
	struct rlb_hf_model *hm = calloc(1, sizeof(*hm));
	struct rlb_err err = { 0, "" };
	int ret, rc = EXIT_FAIL;

	if (!hm) {
		cmd_errorf("config", "out of memory");
		return EXIT_FAIL;
	}
	ret = cmd_check_outputs("config", usage, inp, 1, outp, out ? 1 : 0, 0);
	if (ret) {
		rc = ret;
		goto out;
	}
	if (rlb_hf_model_load(hm, in, name, &err) < 0) {
		cmd_error("config", &err);
		goto out;
	}
	if (rlb_atomic_open(&af, out ? out : "-", &err) < 0) {
		cmd_error("config", &err);
		goto out;
	}
	ret = rlb_hf_model_write_yaml(hm, af.fp, &err);
	ret = rlb_atomic_sync_after(&af, ret, &err);
	if (ret == 0)
		ret = rlb_atomic_commit(&af, &err);
	if (ret < 0) {
		if (out)
			cmd_error("config", &err);
		else
			cmd_stdout_error("config", &err);
		goto out;
	}
	rc = EXIT_OK;
out:
	rlb_atomic_abort(&af);
	free(hm);
	return rc;
}

int cmd_config(int argc, char **argv)
{
	enum { OPT_PRESETS = CMD_OPT_SET + 1, OPT_FROM_HF, OPT_NAME };
	static const struct option longopts[] = {
		CMD_COMMON_LONGOPTS,
		{ "presets", no_argument, NULL, OPT_PRESETS },
		{ "from-hf", required_argument, NULL, OPT_FROM_HF },
		{ "name", required_argument, NULL, OPT_NAME },
		{ "output", required_argument, NULL, 'o' },
		{ NULL, 0, NULL, 0 },
	};
	struct cmd_config_opts o = { NULL, NULL, 0 };
	struct rlb_config cfg;
	struct rlb_err err = { 0, "" };
	const char *hf = NULL, *name = NULL, *out = NULL;
	int c, ret, presets = 0, rc = EXIT_FAIL;

	optind = 1;
	opterr = 0;
	while ((c = getopt_long(argc, argv, ":hc:o:", longopts, NULL)) != -1) {
		switch (c) {
		case OPT_PRESETS:
			presets = 1;
			break;
		case OPT_FROM_HF:
			hf = optarg;
			break;
		case OPT_NAME:
			name = optarg;
			break;
		case 'o':
			out = optarg;
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
	if ((name || out) && !hf) {
		rc = cmd_usage_error("config", usage, "%s needs --from-hf", name ? "--name" : "-o");
		goto out;
	}
	if (hf && (presets || o.path || o.nsets)) {
		rc = cmd_usage_error("config", usage, "--from-hf takes no %s",
				     presets ? "--presets" : o.path ? "-c" : "--set");
		goto out;
	}
	if (presets && (o.path || o.nsets)) {
		/* the list is of the built-in presets, whatever the config */
		rc = cmd_usage_error("config", usage, "--presets takes no %s",
				     o.path ? "-c" : "--set");
		goto out;
	}
	if (hf) {
		if (out && !strcmp(out, "-"))
			out = NULL;
		rc = from_hf(hf, name, out);
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
