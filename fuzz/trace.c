/*
 * trace.c - fuzz target: a routing trace (.rrt), read, read ahead on
 * threads and written again (fuzz_trace).
 */
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	fuzz_trace(fuzz_file(data, size, "in.rrt"));
	return 0;
}
