/*
 * plan.c - fuzz target: a plan file (.rlp), read and written again
 * (fuzz_plan).
 */
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	fuzz_plan(fuzz_file(data, size, "in.rlp"));
	return 0;
}
