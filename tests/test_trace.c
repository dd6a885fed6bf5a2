/*
 * test_trace.c - unit tests of lib/trace (placeholder until the module lands).
 */
#include "suites.h"

Suite *rlb_suite_trace(void)
{
	return suite_create("trace");
}
