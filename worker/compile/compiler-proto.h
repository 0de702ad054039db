/* SPDX-License-Identifier: MIT */
/* worker/compile/compiler-proto.h: what the worker and its compiler helper say to each other. */
#pragma once

#include <stdint.h>

#include "proto.h"

/*
 * One SOCK_SEQPACKET record each way per step, both sides on one host:
 *
 *   worker -> helper  SETUP   the target (arch), the toolkit's include directories, and
 *                             where precompiled headers may be kept
 *   helper -> worker  hello   a cc_rep: NVRTC's version, whether Landlock holds the files
 *   worker -> helper  COMPILE options inline; code, then headers and name expressions
 *                             (the MOD_LOAD extra block, ipc/proto.h) in one sealed memfd
 *   helper -> worker  result  a cc_rep with the log; on success a sealed memfd holding the
 *                             image (worker/compile/cuda-image.h): the cubin and its lowered names
 */

#define CC_MAGIC 0x43435847u /* "GXCC" */
#define CC_LOG_MAX (32u * 1024u)
#define CC_IMAGE_MAX (512u * 1024u * 1024u)
#define CC_ARCH_MAX 16u

enum cc_kind {
	CC_SETUP = 1,
	CC_COMPILE = 2,
};

/* SETUP: after the include directories, one more path: a directory of the helper's own for
 * NVRTC's precompiled headers, which it may write (and empties as it starts). */
#define CC_SETUP_PCH 0x1u

struct cc_setup {
	uint32_t magic;
	uint32_t kind;          /* CC_SETUP */
	char arch[CC_ARCH_MAX]; /* "sm_90", NUL-terminated */
	uint32_t ndirs;
	uint32_t dirs_len; /* then ndirs NUL-terminated paths (and the PCH one), dirs_len bytes */
	uint32_t flags;    /* CC_SETUP_* */
	uint32_t reserved;
};
_Static_assert(sizeof(struct cc_setup) == 40, "helper ABI");

struct cc_req {
	uint32_t magic;
	uint32_t kind; /* CC_COMPILE */
	uint32_t options_len;
	uint32_t code_len;
	uint32_t extra_len; /* after the code in the memfd */
	uint32_t nheaders;
	uint32_t nnames;
	uint32_t reserved;
	/* then options_len bytes of options */
};
_Static_assert(sizeof(struct cc_req) == 32, "helper ABI");

#define CC_LANDLOCKED 0x1u /* hello: the toolkit's headers are readable, nothing else is */

struct cc_rep {
	uint32_t magic;
	int32_t status;
	uint32_t log_len;
	uint32_t version; /* hello: NVRTC's, major * 1000 + minor * 10 */
	uint32_t flags;   /* hello: CC_* */
	uint32_t reserved;
	/* then log_len bytes */
};
_Static_assert(sizeof(struct cc_rep) == 24, "helper ABI");
