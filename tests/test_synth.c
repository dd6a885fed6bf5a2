/*
 * test_synth.c - unit tests of lib/synth (placeholder until the module lands).
 */
#include "suites.h"

Suite *rlb_suite_synth(void)
{
	return suite_create("synth");
}
