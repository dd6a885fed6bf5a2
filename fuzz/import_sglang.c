/*
 * import_sglang.c - fuzz target: one sglang file as relibra capture --from sglang
 * imports it, for the tiny model with one dense layer first (for inputs
 * of size 2 or 3 mod 4, MoE layers interleaved with dense ones; for those
 * of size 4 to 7 mod 8, a hybrid's layer pattern instead).
 */
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	fuzz_import(data, size, RLB_IMPORT_SGLANG, "sglang.jsonl", 1);
	return 0;
}
