/*
 * config_hf.c - fuzz target: a Hugging Face config.json (relibra config
 * --from-hf).  A model it takes must write as a preset that loads as a
 * configuration with the same model, which fuzz_config then checks.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config_hf.h"
#include "err.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	/* on one GPU, as the model section was checked */
	static const char *const one_gpu[] = { "cluster.gpus_per_node=1" };
	struct rlb_hf_model hm;
	struct rlb_config cfg;
	struct rlb_err err;
	char *text = NULL;
	size_t len = 0;
	FILE *fp;

	if (rlb_hf_model_load(&hm, fuzz_file(data, size, "config.json"), NULL, &err) != 0)
		return 0;
	fp = open_memstream(&text, &len);
	if (!fp || rlb_hf_model_write_yaml(&hm, fp, &err) != 0 || fclose(fp) != 0)
		abort();
	if (rlb_config_load(&cfg, fuzz_file((const uint8_t *)text, len, "preset.yaml"), one_gpu, 1,
			    &err) != 0)
		abort();
	/* the model section alone: the rest of cfg is the defaults */
	cfg.model.dense_time_ms = hm.model.dense_time_ms;
	if (memcmp(&cfg.model, &hm.model, sizeof(cfg.model)))
		abort();
	fuzz_config(&cfg);
	free(text);
	return 0;
}
