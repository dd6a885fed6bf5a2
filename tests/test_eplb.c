/*
 * test_eplb.c - unit tests of lib/eplb (placeholder until the module lands).
 */
#include "suites.h"

Suite *rlb_suite_eplb(void)
{
	return suite_create("eplb");
}
