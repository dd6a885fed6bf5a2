/* inspect.c - placeholder for relibra inspect. */
#include <stdio.h>
#include <string.h>
#include "cmd.h"

int cmd_inspect(int argc, char **argv)
{
	if (argc > 1 && !strcmp(argv[1], "-h")) {
		printf("usage: relibra inspect\n");
		return EXIT_OK;
	}
	cmd_errorf("inspect", "not implemented");
	return EXIT_FAIL;
}
