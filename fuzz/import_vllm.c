/*
 * import_vllm.c - fuzz target: one vllm file as relibra capture --from vllm
 * imports it, for the tiny model with one dense layer first.
 */
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	fuzz_import(data, size, RLB_IMPORT_VLLM, "rollout_step0_group0_sample0.npy", 1);
	return 0;
}
