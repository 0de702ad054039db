/* SPDX-License-Identifier: MIT */
/* tests/fuzz/fuzz-cubin.c: libFuzzer target for the worker's cubin and fatbin checks and kernel lists. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cubin.h"
#include "cuda-image.h"
#include "fuzz.h"

/*
 * An input is a client's cubin (or fatbin, or anything). The checks must say yes or no with
 * a message, never read outside the input (the replay runs under ASan in CI), and what they
 * accept must have a kernel list that stays inside it too. The same bytes are also tried as
 * a worker image and as PTX.
 */

struct names {
	const uint8_t *lo, *hi; /* where names may lie */
	unsigned n;
};

static int entry(const char *name, void *userdata)
{
	struct names *s = userdata;

	CHECK(*name != '\0');
	CHECK((const uint8_t *)name >= s->lo && (const uint8_t *)name + strlen(name) < s->hi);
	s->n++;
	return 0;
}

/* PTX names are copied out: only their count is checked. */
static int ptx_entry(const char *name, void *userdata)
{
	struct names *s = userdata;

	CHECK(*name != '\0');
	s->n++;
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const unsigned ccs[] = { 90, 80, 100 };
	struct wrk_cuimage img;
	bool accepted = false;

	for (unsigned i = 0; i < sizeof(ccs) / sizeof(ccs[0]); i++) {
		char *msg = NULL;
		int r = wrk_cubin_check(data, size, ccs[i], &msg);

		CHECK(r == 0 || (r < 0 && msg && *msg));
		accepted |= r == 0;
		free(msg);
	}
	/* Whatever it is, listing its kernels stays inside it: a cubin's or fatbin's names point
	 * into it, PTX's are copied. */
	{
		struct names s = { data, data + size, 0 };
		uint32_t magic = 0;

		if (size >= 4)
			memcpy(&magic, data, 4);
		/* A fatbin has at least its 16-byte header, or it is read as PTX. */
		if (magic == 0x464c457fu || (magic == 0xba55ed50u && size >= 16)) {
			int r = wrk_code_entries(data, size, entry, &s);

			/* A cubin the checks let through always has a readable kernel list. */
			CHECK(!(accepted && magic == 0x464c457fu) || r == 0);
		} else {
			(void)wrk_code_entries(data, size, ptx_entry, &s);
		}
	}
	if (wrk_cuimage_parse(data, size, &img) == 0) {
		CHECK(img.code > data && img.code + img.code_len <= data + size);
		CHECK(img.names_len == 0 || img.names[img.names_len - 1] == '\0');
	}
	return 0;
}
