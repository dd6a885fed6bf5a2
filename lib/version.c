/*
 * version.c - the release of the library in use, for programs that check
 * at run time that the library they loaded matches their headers.
 */
#include "relibra.h"

const char *rlb_version(void)
{
	return RLB_VERSION;
}
