/*
 * util.c - helpers of the fuzz targets: inputs as files, the import sink.
 */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config.h"
#include "err.h"
#include "fuzz.h"
#include "import_internal.h"
#include "trace.h"

static char dir[PATH_MAX];
static char file[PATH_MAX];

static void cleanup(void)
{
	if (file[0])
		unlink(file);
	if (dir[0])
		rmdir(dir);
}

const char *fuzz_file(const uint8_t *data, size_t size, const char *name)
{
	const char *tmp = getenv("TMPDIR");
	FILE *fp;

	if (!dir[0]) {
		snprintf(dir, sizeof(dir), "%s/relibra-fuzz.XXXXXX", tmp ? tmp : "/tmp");
		if (!mkdtemp(dir)) {
			perror("mkdtemp");
			abort();
		}
		atexit(cleanup);
	}
	if (file[0])
		unlink(file);
	if (snprintf(file, sizeof(file), "%s/%s", dir, name) >= (int)sizeof(file))
		abort();
	fp = fopen(file, "wb");
	if (!fp || fwrite(data, 1, size, fp) != size || fclose(fp) != 0) {
		perror(file);
		abort();
	}
	return file;
}

/* Every imported sequence must fit the model the importer was given. */
static int check_seq(void *ctx, const struct rlb_seq *seq, struct rlb_err *err)
{
	const struct rlb_config *cfg = ctx;
	size_t i, n = (size_t)seq->tokens * cfg->model.moe_layers * cfg->model.topk;

	(void)err;
	for (i = 0; i < n; i++)
		if (seq->ids[i] >= cfg->model.experts)
			abort();
	return 0;
}

void fuzz_import(const uint8_t *data, size_t size, enum rlb_import_format f,
		 const char *name, int dense)
{
	struct rlb_import_opts o;
	struct rlb_config cfg;
	struct rlb_err err;

	rlb_config_defaults(&cfg);
	cfg.model.experts = 16;
	cfg.model.topk = 2;
	cfg.model.moe_layers = 4;
	cfg.model.first_dense_layers = dense;
	memset(&o, 0, sizeof(o));
	o.format = f;
	o.step = -1;
	o.group = -1;
	(void)rlb_import_to_sink(&o, fuzz_file(data, size, name), &cfg, check_seq,
				 &cfg, NULL, NULL, &err);
}
