/*
 * config_set.c - fuzz target: --set overrides over the defaults, one
 * KEY=VALUE a line (at most 16), checked by fuzz_config.
 */
#include <stdlib.h>
#include <string.h>

#include "err.h"
#include "fuzz.h"

#define SETS_MAX 16

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *sets[SETS_MAX];
	struct rlb_config cfg;
	struct rlb_err err;
	char *text = malloc(size + 1), *line, *save = NULL;
	size_t n = 0;

	if (!text)
		abort();
	memcpy(text, data, size);
	text[size] = '\0';
	for (line = strtok_r(text, "\n", &save); line && n < SETS_MAX;
	     line = strtok_r(NULL, "\n", &save))
		sets[n++] = line;
	if (rlb_config_load(&cfg, NULL, sets, n, &err) == 0)
		fuzz_config(&cfg);
	free(text);
	return 0;
}
