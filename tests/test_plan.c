/*
 * test_plan.c - unit tests of lib/plan (placeholder until the module lands).
 */
#include "suites.h"

Suite *rlb_suite_plan(void)
{
	return suite_create("plan");
}
