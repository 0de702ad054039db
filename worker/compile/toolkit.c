/* SPDX-License-Identifier: MIT */
/* worker/compile/toolkit.c: the CUDA toolkit's include directories that CUDA C++ modules may use. */
#include <libgen.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "macro.h"
#include "toolkit.h"

/* A directory that only root or this user can change, with `marker` in it. */
static bool trusted_dir(const char *dir, const char *marker)
{
	char path[PATH_MAX + 64];
	struct stat st;

	if (stat(dir, &st) < 0 || !S_ISDIR(st.st_mode) || (st.st_mode & 022) != 0 ||
	    (st.st_uid != 0 && st.st_uid != geteuid()))
		return false;
	(void)snprintf(path, sizeof(path), "%s/%s", dir, marker);
	return access(path, R_OK) == 0;
}

/* Take root/include (and root/include/cccl when the C++ library lives there) if usable. */
static bool try_root(const char *root, struct wrk_toolkit *t)
{
	char inc[PATH_MAX], real[PATH_MAX], cccl[PATH_MAX + 8];

	if ((size_t)snprintf(inc, sizeof(inc), "%s/include", root) >= sizeof(inc) ||
	    !realpath(inc, real) || !trusted_dir(real, "cuda_fp16.h"))
		return false;
	t->ndirs = 0;
	memcpy(t->dirs[t->ndirs++], real, strlen(real) + 1);
	(void)snprintf(cccl, sizeof(cccl), "%s/cccl", real);
	if (strlen(cccl) < PATH_MAX && trusted_dir(cccl, "cuda/std/version"))
		memcpy(t->dirs[t->ndirs++], cccl, strlen(cccl) + 1);
	return true;
}

void wrk_toolkit_find(const char *nvrtc_path, struct wrk_toolkit *ret)
{
	const char *cuda = getenv("CUDA_PATH");
	char real[PATH_MAX];

	ret->ndirs = 0;
	/* The headers of the toolkit NVRTC came with: the two are made for each other. */
	if (nvrtc_path && realpath(nvrtc_path, real)) {
		char root[PATH_MAX + 4];

		(void)snprintf(root, sizeof(root), "%s/..", dirname(real));
		if (strlen(root) < PATH_MAX && try_root(root, ret))
			return;
	}
	if (cuda && *cuda == '/' && try_root(cuda, ret))
		return;
	(void)try_root("/usr/local/cuda", ret);
}
