/*
 * plan.c - fuzz target: a plan file (.rlp).  Every step the reader
 * decodes must pass rlb_step_plan_check, as the reader promises, and
 * print as text.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "err.h"
#include "fuzz.h"
#include "plan.h"
#include "plan_io.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct rlb_plan_reader *r;
	struct rlb_step_plan p;
	struct rlb_err err;
	FILE *null;

	if (rlb_plan_reader_open(&r, fuzz_file(data, size, "in.rlp"), &err) != 0)
		return 0;
	null = fopen("/dev/null", "w");
	memset(&p, 0, sizeof(p));
	while (rlb_plan_reader_next(r, &p, &err) == 1) {
		if (rlb_step_plan_check(&p, NULL, &err) != 0) {
			fprintf(stderr, "decoded plan fails its check: %s\n", err.msg);
			abort();
		}
		if (null)
			(void)rlb_plan_write_text(null, rlb_plan_reader_header(r), &p, &err);
	}
	rlb_step_plan_release(&p);
	if (null)
		fclose(null);
	rlb_plan_reader_free(r);
	return 0;
}
