/* SPDX-License-Identifier: MIT */
/* tests/test-ipc-proto-wire.c: the wire format does not change: every sample is its saved bytes. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "macro.h"
#include "proto-helpers.h"

#ifndef CORPUS_DIR
#error "CORPUS_DIR: tests/fuzz/corpus"
#endif

/*
 * tests/fuzz/corpus holds each sample as tests/fuzz/gen-corpus-proto wrote it when it was
 * made: one byte with its number of fds, then the record. Encoding the samples again must
 * give those bytes: a change of a struct, a number or an encoder shows here. (A new sample
 * is saved by running gen-corpus-proto; an old one is never rewritten.)
 */
static size_t read_dump(const char *name, uint8_t *buf, size_t cap)
{
	char path[4096];
	ssize_t n;
	int fd;

	(void)snprintf(path, sizeof(path), "%s/%s", CORPUS_DIR, name);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		fail_msg("%s: %s (a new sample? run gen-corpus-proto)", path, strerror(errno));
	n = read(fd, buf, cap);
	assert_true(n >= 0);
	(void)close(fd);
	return (size_t)n;
}

static void test_proto_samples_are_their_saved_bytes(void **state)
{
	static uint8_t saved[IPC_MSG_MAX + 2];
	unsigned seen[IPC_TYPE_MAX_] = { 0 };
	struct test_sample s;

	for (unsigned i = 0; test_msg_sample(i, test_msgbuf, sizeof(test_msgbuf), &s); i++) {
		size_t n = read_dump(s.name, saved, sizeof(saved));

		if (n != s.len + 1 || saved[0] != s.nfds)
			fail_msg("%s: %zu bytes and %u fds, saved %zu and %u", s.name, s.len,
				 s.nfds, n ? n - 1 : 0, n ? saved[0] : 0);
		for (size_t k = 0; k < s.len; k++)
			if (test_msgbuf[k] != saved[k + 1])
				fail_msg("%s: byte %zu is 0x%02x, saved 0x%02x", s.name, k,
					 test_msgbuf[k], saved[k + 1]);
		seen[s.type]++;
	}
	for (uint16_t t = 1; t < IPC_TYPE_MAX_; t++)
		if (!seen[t])
			fail_msg("no saved sample of %s", ipc_type_name(t));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_proto_samples_are_their_saved_bytes),
	};

	return cmocka_run_group_tests_name("ipc-proto-wire", tests, NULL, NULL);
}
