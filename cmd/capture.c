/* capture.c - placeholder for relibra capture. */
#include <stdio.h>
#include <string.h>
#include "cmd.h"

int cmd_capture(int argc, char **argv)
{
	if (argc > 1 && !strcmp(argv[1], "-h")) {
		printf("usage: relibra capture\n");
		return EXIT_OK;
	}
	cmd_errorf("capture", "not implemented");
	return EXIT_FAIL;
}
