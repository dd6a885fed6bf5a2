/*
 * test_schedule.c - unit tests of lib/schedule (placeholder until the module lands).
 */
#include "suites.h"

Suite *rlb_suite_schedule(void)
{
	return suite_create("schedule");
}
