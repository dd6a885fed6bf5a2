/*
 * schedule.c - fuzz target: a schedule file (relibra.schedule/1), and its
 * steps 0 to 3 checked against eight sequences on four ranks.
 */
#include "err.h"
#include "fuzz.h"
#include "schedule.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const uint32_t seq_tokens[] = { 100, 300, 50, 700, 0, 256, 64, 1000 };
	struct rlb_schedule_file *f;
	struct rlb_schedule s;
	struct rlb_err err;
	uint32_t step;

	if (rlb_schedule_file_load(&f, fuzz_file(data, size, "schedule.json"), &err) != 0)
		return 0;
	for (step = 0; step < 4; step++)
		if (rlb_schedule_file_step(f, step, seq_tokens, 8, 4, 512, &s, &err) == 0)
			rlb_schedule_release(&s);
	rlb_schedule_file_free(f);
	return 0;
}
