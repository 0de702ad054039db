/* SPDX-License-Identifier: MIT */
/* tests/nvrtc-helpers.c: cubins, PTX and fatbins made in the test, as a client would make them. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "helpers.h"
#include "macro.h"
#include "nvrtc-helpers.h"
#include "nvrtc-loader.h"

uint8_t *test_nvrtc_compile(const char *src, const char *arch, bool ptx, size_t *ret_len)
{
	/* Loaded once: a test compiles several times, and the library stays for the process. */
	static struct nvrtc nv;
	char why[256], opt[64];
	const char *opts[] = { opt };
	nvrtcProgram prog;
	uint8_t *code;

	if (!nv.lib)
		assert_int_equal(nvrtc_load(&nv, why, sizeof(why)), 0);
	(void)snprintf(opt, sizeof(opt), "--gpu-architecture=%s", arch);
	assert_int_equal(nv.create(&prog, src, "c.cu", 0, NULL, NULL), NVRTC_SUCCESS);
	assert_int_equal(nv.compile(prog, 1, opts), NVRTC_SUCCESS);
	if (ptx) {
		/* The worker's loader has no use for PTX out of NVRTC: these two are the test's. */
		nvrtcResult (*size)(nvrtcProgram, size_t *) = dlsym(nv.lib, "nvrtcGetPTXSize");
		nvrtcResult (*get)(nvrtcProgram, char *) = dlsym(nv.lib, "nvrtcGetPTX");

		assert_non_null(size);
		assert_non_null(get);
		assert_int_equal(size(prog, ret_len), NVRTC_SUCCESS);
		code = malloc(*ret_len);
		assert_non_null(code);
		assert_int_equal(get(prog, (char *)code), NVRTC_SUCCESS);
	} else {
		assert_int_equal(nv.cubin_size(prog, ret_len), NVRTC_SUCCESS);
		code = malloc(*ret_len);
		assert_non_null(code);
		assert_int_equal(nv.cubin(prog, (char *)code), NVRTC_SUCCESS);
	}
	(void)nv.destroy(&prog);
	return code;
}

uint8_t *test_fatbin(const uint8_t *cubin, size_t len, uint32_t sm, size_t *ret_len)
{
	size_t size = ALIGN_UP(len, 8);
	uint8_t *f = calloc(1, 16 + 64 + size);
	uint32_t magic = 0xba55ed50u, hsize = 64;
	uint16_t version = 1, head = 16, kind = 2, ever = 0x101;
	uint64_t fat = 64 + size, sz = size, flags = 0x11;

	assert_non_null(f);
	memcpy(f, &magic, 4);
	memcpy(f + 4, &version, 2);
	memcpy(f + 6, &head, 2);
	memcpy(f + 8, &fat, 8);
	memcpy(f + 16, &kind, 2);
	memcpy(f + 18, &ever, 2);
	memcpy(f + 20, &hsize, 4);
	memcpy(f + 24, &sz, 8);
	memcpy(f + 16 + 28, &sm, 4);
	memcpy(f + 16 + 40, &flags, 8);
	memcpy(f + 16 + 64, cubin, len);
	*ret_len = 16 + 64 + size;
	return f;
}
