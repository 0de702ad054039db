/* SPDX-License-Identifier: MIT */
/* tests/fuzz/fuzz-main.c: replay saved inputs (files, or directories of them) through a target. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fuzz.h"

/* Run one file through the target, from a buffer of exactly its size (so ASan sees overreads). */
static int run_file(int dirfd, const char *name)
{
	struct stat st;
	uint8_t *buf;
	ssize_t n;
	int fd = openat(dirfd, name, O_RDONLY | O_CLOEXEC);

	if (fd < 0 || fstat(fd, &st) < 0) {
		fprintf(stderr, "fuzz-replay: %s: %s\n", name, strerror(errno));
		if (fd >= 0)
			(void)close(fd);
		return -1;
	}
	buf = malloc(st.st_size > 0 ? (size_t)st.st_size : 1);
	if (!buf) {
		(void)close(fd);
		return -1;
	}
	n = read(fd, buf, (size_t)st.st_size);
	(void)close(fd);
	if (n != st.st_size) {
		fprintf(stderr, "fuzz-replay: %s: short read\n", name);
		free(buf);
		return -1;
	}
	(void)LLVMFuzzerTestOneInput(buf, (size_t)n);
	free(buf);
	return 0;
}

static int run_dir(const char *path, unsigned *count)
{
	struct dirent **names;
	int dirfd, r = 0;
	int n = scandir(path, &names, NULL, alphasort);

	if (n < 0)
		return -1;
	dirfd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	for (int i = 0; i < n; i++) {
		if (dirfd >= 0 && names[i]->d_name[0] != '.') {
			if (run_file(dirfd, names[i]->d_name) < 0)
				r = -1;
			else
				(*count)++;
		}
		free(names[i]);
	}
	free(names);
	if (dirfd < 0)
		return -1;
	(void)close(dirfd);
	return r;
}

int main(int argc, char **argv)
{
	unsigned count = 0;
	int r = 0;

	if (argc < 2) {
		fprintf(stderr, "usage: %s FILE|DIR...\n", argv[0]);
		return 2;
	}
	for (int i = 1; i < argc; i++) {
		struct stat st;

		if (stat(argv[i], &st) < 0) {
			fprintf(stderr, "fuzz-replay: %s: %s\n", argv[i], strerror(errno));
			r = -1;
		} else if (S_ISDIR(st.st_mode)) {
			r |= run_dir(argv[i], &count);
		} else if (run_file(AT_FDCWD, argv[i]) < 0) {
			r = -1;
		} else {
			count++;
		}
	}
	printf("fuzz-replay: %u inputs\n", count);
	/* No input at all means the corpus went missing: that is a failure, not a pass. */
	return r == 0 && count > 0 ? 0 : 1;
}
