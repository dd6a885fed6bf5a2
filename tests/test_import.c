/*
 * test_import.c - unit tests of lib/import (placeholder until the module lands).
 */
#include "suites.h"

Suite *rlb_suite_import(void)
{
	return suite_create("import");
}
