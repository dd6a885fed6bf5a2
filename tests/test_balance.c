/*
 * test_balance.c - unit tests of lib/balance (placeholder until the module lands).
 */
#include "suites.h"

Suite *rlb_suite_balance(void)
{
	return suite_create("balance");
}
