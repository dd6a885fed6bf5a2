/*
 * report.c - fuzz target: a result JSON (a plan summary or train-step
 * metrics) as relibra report reads it, then every table format and chart.
 */
#include <stdio.h>

#include "err.h"
#include "fuzz.h"
#include "report.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct rlb_report_chart_opts o = { -1 };
	struct rlb_report r;
	struct rlb_err err;
	FILE *null = fopen("/dev/null", "w");
	int f, c;

	if (!null)
		return 0;
	rlb_report_init(&r);
	if (rlb_report_add_file(&r, fuzz_file(data, size, "result.json"), &err) == 0 &&
	    rlb_report_finish(&r, &err) == 0) {
		for (f = RLB_REPORT_TABLE; f <= RLB_REPORT_JSON; f++)
			(void)rlb_report_write(&r, (enum rlb_report_format)f, null, &err);
		for (c = 0; c < RLB_CHART_COUNT; c++)
			(void)rlb_report_chart_svg(&r, (enum rlb_report_chart)c, 0, &o,
						   null, &err);
		(void)rlb_report_write_html(&r, &o, null, &err);
	}
	rlb_report_release(&r);
	fclose(null);
	return 0;
}
