/*
 * check_main.c - the unit-test runner: every lib module's Check suite.
 * CK_RUN_SUITE=name selects one (Check's own variable).
 */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "suites.h"

const char *rlb_test_srcdir(void)
{
	const char *d = getenv("RLB_TEST_SRCDIR");

	return d && *d ? d : ".";
}

const char *rlb_test_tmpdir(void)
{
	const char *d = getenv("RLB_TEST_TMPDIR");

	return d && *d ? d : "/tmp";
}

int main(void)
{
	SRunner *sr = srunner_create(rlb_suite_util());
	int failed;

	srunner_add_suite(sr, rlb_suite_config());
	srunner_add_suite(sr, rlb_suite_config_hf());
	srunner_add_suite(sr, rlb_suite_trace());
	srunner_add_suite(sr, rlb_suite_schedule());
	srunner_add_suite(sr, rlb_suite_synth());
	srunner_add_suite(sr, rlb_suite_import());
	srunner_add_suite(sr, rlb_suite_eplb());
	srunner_add_suite(sr, rlb_suite_replicate());
	srunner_add_suite(sr, rlb_suite_plan());
	srunner_add_suite(sr, rlb_suite_balance());
	srunner_add_suite(sr, rlb_suite_sim());
	srunner_add_suite(sr, rlb_suite_report());
	srunner_add_suite(sr, rlb_suite_expert());
	srunner_add_suite(sr, rlb_suite_exec());
	srunner_add_suite(sr, rlb_suite_calibrate());
	srunner_add_suite(sr, rlb_suite_cuda());
	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	printf("unit: %d run, %d failed\n", srunner_ntests_run(sr), failed);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
