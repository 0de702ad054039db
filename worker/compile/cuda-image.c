/* SPDX-License-Identifier: MIT */
/* worker/compile/cuda-image.c: a CUDA module as the worker caches it: code for the driver, and kernel names. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cuda-image.h"
#include "macro.h"

#define IMAGE_MAGIC "GXCUIMG1"

struct image_hdr {
	char magic[8];
	uint64_t code_len;
	uint64_t names_len;
	uint32_t nnames;
	uint32_t reserved;
};
_Static_assert(sizeof(struct image_hdr) == 32, "image format");

int wrk_cuimage_pack(const void *code, size_t code_len, const char *names, size_t names_len,
		     uint32_t nnames, uint8_t **ret, size_t *ret_len)
{
	struct image_hdr h = { .code_len = code_len, .names_len = names_len, .nnames = nnames };
	size_t len = sizeof(h) + code_len + names_len;
	uint8_t *p = malloc(len);

	if (!p)
		return -ENOMEM;
	memcpy(h.magic, IMAGE_MAGIC, sizeof(h.magic));
	memcpy(p, &h, sizeof(h));
	memcpy(p + sizeof(h), code, code_len);
	if (names_len)
		memcpy(p + sizeof(h) + code_len, names, names_len);
	*ret = p;
	*ret_len = len;
	return 0;
}

int wrk_cuimage_parse(const uint8_t *p, size_t len, struct wrk_cuimage *ret)
{
	struct image_hdr h;
	const char *names;
	uint32_t strings = 0;

	if (len < sizeof(h))
		return -EBADMSG;
	memcpy(&h, p, sizeof(h));
	if (memcmp(h.magic, IMAGE_MAGIC, sizeof(h.magic)) != 0 || h.code_len == 0 ||
	    h.code_len > len - sizeof(h) || h.names_len != len - sizeof(h) - h.code_len)
		return -EBADMSG;
	/* Exactly 2 * nnames strings, each ended by its NUL. */
	names = (const char *)p + sizeof(h) + h.code_len;
	for (size_t i = 0; i < h.names_len; i++)
		strings += names[i] == '\0';
	if (strings != 2ULL * h.nnames || (h.names_len && names[h.names_len - 1] != '\0'))
		return -EBADMSG;
	*ret = (struct wrk_cuimage){
		.code = p + sizeof(h),
		.code_len = h.code_len,
		.names = names,
		.names_len = h.names_len,
		.nnames = h.nnames,
	};
	return 0;
}
