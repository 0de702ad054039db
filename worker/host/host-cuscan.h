/* SPDX-License-Identifier: MIT */
/* worker/host-cuscan.h: what the host back end reads in preprocessed CUDA C++: kernels, arrays. */
#pragma once

#include <stdbool.h>
#include <stddef.h>

/*
 * The host back end compiles CUDA C++ twice: first the preprocessor alone, with
 * gpux_cuda.h's __global__ and __shared__ left as words of their own, whose output this
 * reads; then the source again, with an entry for each kernel found here after it.
 *
 * A reading of tokens, not C++ (as worker/knames.c's of explicit instantiations): it follows
 * namespaces, extern "C" and braces, and takes from the client's files (not system headers)
 * each __global__ function defined at namespace scope that is not a template, each
 * extern __shared__ array, and each __device__ or __constant__ variable defined at namespace
 * scope (not a template, not extern). What it misreads makes the second compile fail, with a
 * message, never a wrong kernel.
 */

struct wrk_cuscan_kernel {
	char *scope;  /* enclosing namespaces, "::"-separated, an anonymous one empty ("a::::b") */
	char *name;   /* as written at its definition ("f", or "x::f" out of line) */
	char *params; /* its parameters' tokens, default arguments left out */
	bool c_linkage; /* extern "C" */
};

/* A __device__ or __constant__ variable defined at namespace scope. */
struct wrk_cuscan_global {
	char *scope;  /* as a kernel's */
	char *name;   /* its identifier */
	char *symbol; /* mangled as the compiler names it ("x", "_ZN2ns1xE") */
};

struct wrk_cuscan {
	struct wrk_cuscan_kernel *kernels;
	unsigned nkernels;
	struct wrk_cuscan_global *globals; /* once each */
	unsigned nglobals;
	char **shared; /* the symbols of extern __shared__ arrays (mangled), once each */
	unsigned nshared;
	/* What the source uses that the host back end does not have ("inline assembly (asm) at
	 * kernel.cu:12"), or NULL: then the module is not compiled. */
	char *unsupported;
};

/*
 * Read preprocessor output (text, len bytes: its line markers say which file each line is
 * of, and whether that is a system header) into *ret, to release with wrk_cuscan_done().
 * The client's files are those whose names begin with user_dir. 0, -ENOMEM, or -E2BIG for
 * more kernels, shared arrays or variables than a module may have.
 */
int wrk_cuscan_run(const char *text, size_t len, const char *user_dir, struct wrk_cuscan *ret);
void wrk_cuscan_done(struct wrk_cuscan *s);

/* What a header at path (len bytes) is when it belongs to one of the toolkit's libraries
 * that the host back end does not have ("CUB", for a path with a folder cub/), or NULL. */
const char *wrk_cuscan_library(const char *path, size_t len);
