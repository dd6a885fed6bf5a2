/*
 * test_replicate.c - unit tests of lib/replicate (placeholder until the module lands).
 */
#include "suites.h"

Suite *rlb_suite_replicate(void)
{
	return suite_create("replicate");
}
