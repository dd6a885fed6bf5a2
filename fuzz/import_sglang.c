/*
 * import_sglang.c - fuzz target: one sglang file as relibra capture --from sglang
 * imports it, for the tiny model with one dense layer first.
 */
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	fuzz_import(data, size, RLB_IMPORT_SGLANG, "sglang.jsonl", 1);
	return 0;
}
