/*
 * config.c - fuzz target: a YAML config.  A config that loads must write
 * back as YAML that loads again to the same values.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "err.h"
#include "fuzz.h"

static char *yaml_of(const struct rlb_config *cfg, size_t *len)
{
	struct rlb_err err;
	char *buf = NULL;
	FILE *fp = open_memstream(&buf, len);

	if (!fp || rlb_config_write_yaml(cfg, fp, &err) != 0 || fclose(fp) != 0)
		abort();
	return buf;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct rlb_config cfg, again;
	struct rlb_err err;
	char *a, *b;
	size_t alen, blen;

	if (rlb_config_load(&cfg, fuzz_file(data, size, "in.yaml"), NULL, 0, &err) != 0)
		return 0;
	a = yaml_of(&cfg, &alen);
	if (rlb_config_load(&again, fuzz_file((const uint8_t *)a, alen, "again.yaml"),
			    NULL, 0, &err) != 0) {
		fprintf(stderr, "written config does not load: %s\n", err.msg);
		abort();
	}
	b = yaml_of(&again, &blen);
	if (alen != blen || memcmp(a, b, alen) != 0) {
		fprintf(stderr, "written config loads to other values:\n%s\n---\n%s\n", a, b);
		abort();
	}
	free(a);
	free(b);
	return 0;
}
