/*
 * schedule.c - fuzz target: a schedule file (relibra.schedule/1), and its
 * steps 0 to 3 checked against eight sequences on four ranks.  A step
 * that passes must write as a schedule file (as inspect --schedule
 * writes it) that reads back to the same schedule.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "err.h"
#include "fuzz.h"
#include "schedule.h"

static const uint32_t seq_tokens[] = { 100, 300, 50, 700, 0, 256, 64, 1000 };

static void round_trip(const struct rlb_schedule *s)
{
	struct rlb_schedule_file *f;
	struct rlb_schedule back;
	struct rlb_err err;
	json_t *doc = json_pack("{s:s, s:[o]}", "schema", RLB_SCHEDULE_SCHEMA, "steps",
				rlb_schedule_step_json(s));
	char *text = doc ? json_dumps(doc, JSON_COMPACT) : NULL;

	if (!text)
		abort();
	if (rlb_schedule_file_load(&f, fuzz_file((const uint8_t *)text, strlen(text),
						 "again.json"), &err) != 0 ||
	    rlb_schedule_file_step(f, s->step, seq_tokens, 8, 4, 512, &back, &err) != 0) {
		fprintf(stderr, "a schedule written again does not read: %s\n%s\n", err.msg, text);
		abort();
	}
	if (back.micro_batches != s->micro_batches || back.nchunks != s->nchunks ||
	    memcmp(back.chunks, s->chunks, s->nchunks * sizeof(*s->chunks)) != 0) {
		fprintf(stderr, "a schedule written again reads otherwise:\n%s\n", text);
		abort();
	}
	rlb_schedule_release(&back);
	rlb_schedule_file_free(f);
	free(text);
	json_decref(doc);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct rlb_schedule_file *f;
	struct rlb_schedule s;
	struct rlb_err err;
	uint32_t step;

	if (rlb_schedule_file_load(&f, fuzz_file(data, size, "schedule.json"), &err) != 0)
		return 0;
	for (step = 0; step < 4; step++)
		if (rlb_schedule_file_step(f, step, seq_tokens, 8, 4, 512, &s, &err) == 0) {
			round_trip(&s);
			rlb_schedule_release(&s);
		}
	rlb_schedule_file_free(f);
	return 0;
}
