/* config.c - placeholder for relibra config. */
#include <stdio.h>
#include <string.h>
#include "cmd.h"

int cmd_config(int argc, char **argv)
{
	if (argc > 1 && !strcmp(argv[1], "-h")) {
		printf("usage: relibra config\n");
		return EXIT_OK;
	}
	cmd_errorf("config", "not implemented");
	return EXIT_FAIL;
}
