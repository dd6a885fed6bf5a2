/*
 * test_config.c - unit tests of lib/config (placeholder until the module lands).
 */
#include "suites.h"

Suite *rlb_suite_config(void)
{
	return suite_create("config");
}
