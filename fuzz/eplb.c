/*
 * eplb.c - fuzz target: an EPLB weight matrix (relibra plan
 * --eplb-weights), rebalanced with the slots, groups, nodes and GPUs that
 * the input's first line gives ("P G N X"; absent: 16 4 2 8).  A result
 * must place every expert at least once and fill every slot.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "eplb.h"
#include "err.h"
#include "fuzz.h"

static void check(const struct rlb_eplb_result *res)
{
	size_t l, s, e;

	for (l = 0; l < res->num_layers; l++) {
		size_t sum = 0;

		for (e = 0; e < res->num_experts; e++) {
			int32_t c = res->logcnt[l * res->num_experts + e];

			if (c < 1 || (size_t)c > res->max_count)
				abort();
			sum += (size_t)c;
		}
		if (sum != res->num_slots)
			abort();
		for (s = 0; s < res->num_slots; s++) {
			int32_t e2 = res->phy2log[l * res->num_slots + s];

			if (e2 < 0 || (size_t)e2 >= res->num_experts)
				abort();
		}
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct rlb_eplb_params p = { 16, 4, 2, 8 };
	struct rlb_eplb_result res;
	struct rlb_err err;
	const uint8_t *nl = memchr(data, '\n', size < 64 ? size : 64);
	double *w = NULL;
	size_t layers, experts;
	char head[64];

	/* released below also when the size check skips the rebalance */
	memset(&res, 0, sizeof(res));
	if (nl) {
		memcpy(head, data, (size_t)(nl - data));
		head[nl - data] = '\0';
		if (sscanf(head, "%u %u %u %u", &p.num_slots, &p.num_groups,
			   &p.num_nodes, &p.num_gpus) == 4) {
			size -= (size_t)(nl + 1 - data);
			data = nl + 1;
		}
	}
	if (rlb_eplb_weights_load(fuzz_file(data, size, "weights.json"), &w, &layers,
				  &experts, &err) != 0)
		return 0;
	/* Keep each run short: the planner's cost grows with the sizes. */
	if (layers * experts <= 1 << 16 && p.num_slots <= 1 << 16 &&
	    rlb_eplb_rebalance(w, layers, experts, &p, &res, &err) == 0)
		check(&res);
	rlb_eplb_result_release(&res);
	free(w);
	return 0;
}
