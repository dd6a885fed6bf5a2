/*
 * config.c - fuzz target: a YAML config, checked by fuzz_config.
 */
#include "config.h"
#include "err.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct rlb_config cfg;
	struct rlb_err err;

	if (rlb_config_load(&cfg, fuzz_file(data, size, "in.yaml"), NULL, 0, &err) == 0)
		fuzz_config(&cfg);
	return 0;
}
