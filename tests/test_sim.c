/*
 * test_sim.c - unit tests of lib/sim (placeholder until the module lands).
 */
#include "suites.h"

Suite *rlb_suite_sim(void)
{
	return suite_create("sim");
}
