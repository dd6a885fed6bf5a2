/*
 * driver.c - replay files through a fuzz target without libFuzzer: each
 * argument is one input (a directory: each file in it).  Exits 0 when
 * every input ran; a crash or a sanitizer report is the failure.
 */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fuzz.h"

static int run_file(const char *path)
{
	FILE *fp = fopen(path, "rb");
	uint8_t *buf = NULL;
	size_t n = 0, cap = 0, got;

	if (!fp) {
		perror(path);
		return 1;
	}
	do {
		if (n == cap) {
			uint8_t *nb = realloc(buf, cap = cap ? 2 * cap : 65536);

			if (!nb) {
				fprintf(stderr, "%s: out of memory\n", path);
				free(buf);
				fclose(fp);
				return 1;
			}
			buf = nb;
		}
		got = fread(buf + n, 1, cap - n, fp);
		n += got;
	} while (got > 0);
	if (ferror(fp)) {
		perror(path);
		free(buf);
		fclose(fp);
		return 1;
	}
	fclose(fp);
	LLVMFuzzerTestOneInput(buf, n);
	free(buf);
	return 0;
}

static int run_dir(const char *path)
{
	struct dirent **names;
	char sub[4096];
	int i, n, bad = 0;

	n = scandir(path, &names, NULL, alphasort);
	if (n < 0) {
		perror(path);
		return 1;
	}
	for (i = 0; i < n; i++) {
		if (names[i]->d_name[0] != '.') {
			snprintf(sub, sizeof(sub), "%s/%s", path, names[i]->d_name);
			bad |= run_file(sub);
		}
		free(names[i]);
	}
	free(names);
	return bad;
}

int main(int argc, char **argv)
{
	struct stat st;
	int i, bad = 0;

	if (argc < 2) {
		fprintf(stderr, "usage: %s FILE|DIR...\n", argv[0]);
		return 2;
	}
	for (i = 1; i < argc; i++) {
		if (stat(argv[i], &st) != 0) {
			perror(argv[i]);
			bad = 1;
		} else {
			bad |= S_ISDIR(st.st_mode) ? run_dir(argv[i]) : run_file(argv[i]);
		}
	}
	return bad;
}
