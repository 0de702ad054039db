/* SPDX-License-Identifier: MIT */
/* tests/fuzz/gen-corpus-proto.c: write fuzz-proto's seed inputs: every message, and broken ones. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "helpers.h"
#include "macro.h"

/*
 * Usage: gen-corpus-proto DIR. Each seed is fuzz-proto's input format: one byte with the
 * number of fds, then the record. Valid seeds are named after the sample, broken ones
 * "bad-<what>".
 */

static const char *dir;
static uint8_t buf[IPC_MSG_MAX + 2];

static void save(const char *name, unsigned nfds, const uint8_t *msg, size_t len)
{
	char path[4096];
	int fd;

	(void)snprintf(path, sizeof(path), "%s/%s", dir, name);
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0 || write(fd, &(uint8_t){ (uint8_t)nfds }, 1) != 1 ||
	    write(fd, msg, len) != (ssize_t)len) {
		fprintf(stderr, "gen-corpus-proto: %s: %s\n", path, strerror(errno));
		exit(1);
	}
	(void)close(fd);
}

/* Find a sample by name into buf. */
static struct test_sample sample(const char *name)
{
	struct test_sample s;

	for (unsigned i = 0; test_msg_sample(i, buf, sizeof(buf), &s); i++)
		if (strcmp(s.name, name) == 0)
			return s;
	fprintf(stderr, "gen-corpus-proto: no sample %s\n", name);
	exit(1);
}

/* Save sample `name` with its header changed by `edit`. */
static void save_hdr(const char *out, const char *name, void (*edit)(struct ipc_hdr *h))
{
	struct test_sample s = sample(name);
	struct ipc_hdr h = test_hdr_get(buf);

	edit(&h);
	test_hdr_set(buf, &h);
	save(out, h.nfds, buf, s.len);
}

/* Save sample `name` with the payload's bytes [off, off + n) replaced. */
static void save_patch(const char *out, const char *name, size_t off, const void *bytes, size_t n)
{
	struct test_sample s = sample(name);

	memcpy(buf + sizeof(struct ipc_hdr) + off, bytes, n);
	save(out, s.nfds, buf, s.len);
}

static void magic(struct ipc_hdr *h)
{
	h->magic = 0x4758;
}

static void version_low(struct ipc_hdr *h)
{
	h->version = IPC_VERSION_MIN - 1;
}

static void version_high(struct ipc_hdr *h)
{
	h->version = IPC_VERSION + 1;
}

static void len_plus_one(struct ipc_hdr *h)
{
	h->len++;
}

static void type_unknown(struct ipc_hdr *h)
{
	h->type = IPC_TYPE_MAX_;
}

static void fds_too_many(struct ipc_hdr *h)
{
	h->nfds = IPC_FDS_MAX + 1;
}

static void fds_one(struct ipc_hdr *h)
{
	h->nfds = 1;
}

int main(int argc, char **argv)
{
	struct test_sample s;
	uint64_t u64;
	uint32_t u32;
	int32_t i32;

	if (argc != 2) {
		fprintf(stderr, "usage: %s DIR\n", argv[0]);
		return 2;
	}
	dir = argv[1];

	for (unsigned i = 0; test_msg_sample(i, buf, sizeof(buf), &s); i++)
		save(s.name, s.nfds, buf, s.len);

	save_hdr("bad-magic", "hello", magic);
	save_hdr("bad-version-low", "welcome", version_low);
	save_hdr("bad-version-high", "submit", version_high);
	save_hdr("bad-len", "done-text", len_plus_one);
	save_hdr("bad-type", "killed", type_unknown);
	save_hdr("bad-too-many-fds", "attach", fds_too_many);

	s = sample("attach");
	save("bad-nfds-mismatch", 2, buf, s.len);
	s = sample("mod-load-fd");
	save("bad-mod-load-fd-without-fd", 0, buf, s.len);
	s = sample("status");
	save("bad-short", 0, buf, 9);
	save("bad-truncated", 0, buf, s.len - 1);

	/* SUBMIT's first argument (a scalar) at offset UINT64_MAX - 1: offset + size wraps. */
	u64 = UINT64_MAX - 1;
	save_patch("bad-submit-scalar-wraps", "submit",
		   sizeof(struct ipc_submit) + offsetof(struct ipc_arg, offset), &u64, 8);
	/* Its second argument (a buffer) at offset UINT64_MAX, 4096 bytes long. */
	u64 = UINT64_MAX;
	save_patch("bad-submit-buffer-wraps", "submit",
		   sizeof(struct ipc_submit) + sizeof(struct ipc_arg) +
			   offsetof(struct ipc_arg, offset),
		   &u64, 8);
	/* A NUL inside the kernel name "saxpy". */
	save_patch("bad-submit-name-nul", "submit", sizeof(struct ipc_submit) + 6 * 32 + 2, "", 1);
	save_patch("bad-submit-grid-zero", "submit", offsetof(struct ipc_submit, grid), "\0\0\0\0",
		   4);
	save_patch("bad-submit-grid-too-big", "submit", offsetof(struct ipc_submit, grid),
		   "\0\0\0\x80", 4);
	save_patch("bad-mod-load-options-nul", "mod-load-inline", sizeof(struct ipc_mod_load) + 3,
		   "", 1);
	/* mod-load-headers: its code is 52 bytes, then header "v.h" (a name of 3 bytes), then
	 * the name expression "k<int>". */
	u32 = 0;
	save_patch("bad-mod-load-header-name-empty", "mod-load-headers",
		   sizeof(struct ipc_mod_load) + 52, &u32, 4);
	save_patch("bad-mod-load-header-name-nul", "mod-load-headers",
		   sizeof(struct ipc_mod_load) + 52 + 8 + 1, "", 1);
	u32 = 2;
	save_patch("bad-mod-load-headers-count", "mod-load-headers",
		   offsetof(struct ipc_mod_load, nheaders), &u32, 4);
	u32 = IPC_LANG_PTX;
	save_patch("bad-mod-load-headers-not-cuda", "mod-load-headers",
		   offsetof(struct ipc_mod_load, lang), &u32, 4);
	u32 = 100;
	save_patch("bad-mod-load-name-too-long", "mod-load-headers",
		   sizeof(struct ipc_mod_load) + 52 + 8 + 3 + 11, &u32, 4);
	i32 = 1;
	save_patch("bad-done-status-positive", "done", 0, &i32, 4);
	i32 = IPC_STATUS_MIN - 1;
	save_patch("bad-done-status-low", "done", 0, &i32, 4);
	save_patch("bad-status-loop-unterminated", "status", offsetof(struct ipc_status, loop),
		   "0123456789abcdef", 16);
	/* The second device's name fills its 64 bytes with no NUL. */
	s = sample("status");
	memset(buf + sizeof(struct ipc_hdr) + sizeof(struct ipc_status) +
		       sizeof(struct ipc_dev_status) + offsetof(struct ipc_device_info, name),
	       'n', 64);
	save("bad-status-name-unterminated", 0, buf, s.len);
	/* Pages: one that starts past the end of the devices; a driver name with no NUL. */
	u32 = 2;
	save_patch("bad-status-page-past-end", "status", offsetof(struct ipc_status, first), &u32,
		   4);
	s = sample("status");
	memset(buf + sizeof(struct ipc_hdr) + sizeof(struct ipc_status) +
		       offsetof(struct ipc_dev_status, stats.driver),
	       'd', sizeof(((struct ipc_stats *)0)->driver));
	save("bad-status-driver-unterminated", 0, buf, s.len);
	u32 = 2;
	save_patch("bad-welcome-flag-unknown", "welcome", offsetof(struct ipc_welcome, flags), &u32,
		   4);
	u32 = IPC_MOD_MEMORY + 1;
	save_patch("bad-mod-info-source", "mod-info", offsetof(struct ipc_mod_info, source), &u32,
		   4);
	save_hdr("bad-drain-with-fd", "drain", fds_one);

	/* Device buffers: a fd where none belongs, an empty buffer, copies that are wrong. */
	save_hdr("bad-dbuf-free-with-fd", "dbuf-free", fds_one);
	u64 = 0;
	save_patch("bad-dbuf-alloc-size-zero", "dbuf-alloc", offsetof(struct ipc_dbuf_alloc, size),
		   &u64, 8);
	save_patch("bad-copy-size-zero", "copy-to-dbuf", offsetof(struct ipc_copy, size), &u64, 8);
	u32 = IPC_COPY_TO_DBUF | IPC_COPY_FROM_DBUF;
	save_patch("bad-copy-dir", "copy-to-dbuf", offsetof(struct ipc_copy, dir), &u32, 4);
	/* Ranges from offset 2^64 - 4095: their ends (4096 bytes or 1 MiB on) wrap past 0. */
	u64 = UINT64_MAX - 4094;
	save_patch("bad-copy-dbuf-offset-wraps", "copy-to-dbuf",
		   offsetof(struct ipc_copy, dbuf_offset), &u64, 8);
	save_patch("bad-copy-seg-offset-wraps", "copy-from-dbuf",
		   offsetof(struct ipc_copy, seg_offset), &u64, 8);
	save_patch("bad-dbuf-host-offset-wraps", "dbuf-host",
		   offsetof(struct ipc_dbuf_host, seg_offset), &u64, 8);
	u32 = IPC_MARKS_PAGES;
	save_patch("bad-marks-index", "marks", offsetof(struct ipc_marks_offer, index), &u32, 4);
	/* CACHED on submit-dbuf-cached's first argument (a device buffer), then an unknown flag
	 * beside CACHED on its second (an IN). */
	u32 = IPC_ARG_CACHED;
	save_patch("bad-submit-cached-on-dbuf", "submit-dbuf-cached",
		   sizeof(struct ipc_submit) + offsetof(struct ipc_arg, flags), &u32, 4);
	u32 = IPC_ARG_CACHED | (IPC_ARG_CACHED << 1);
	save_patch("bad-submit-flag-unknown", "submit-dbuf-cached",
		   sizeof(struct ipc_submit) + sizeof(struct ipc_arg) +
			   offsetof(struct ipc_arg, flags),
		   &u32, 4);

	/* gpux top's pages: a flag nobody knows; clients not by id; more than the total. */
	u32 = 1;
	save_patch("bad-clients-req-flag", "clients-req", offsetof(struct ipc_clients_req, flags),
		   &u32, 4);
	u64 = 7;
	save_patch("bad-clients-not-by-id", "clients",
		   sizeof(struct ipc_clients) + sizeof(struct ipc_client_info), &u64, 8);
	u32 = 1;
	save_patch("bad-clients-over-total", "clients", offsetof(struct ipc_clients, total), &u32,
		   4);

	/* Questions about symbols: a name without its NUL, one longer than it says, a device
	 * buffer with a kernel's attributes; answers below -1, or of an unknown flag. */
	u32 = IPC_KERNEL_NAME_MAX + 1;
	save_patch("bad-kernel-attrs-req-name-long", "kernel-attrs-req",
		   offsetof(struct ipc_sym_req, name_len), &u32, 4);
	u32 = 4;
	save_patch("bad-global-req-name-nul", "global-req", offsetof(struct ipc_sym_req, name_len),
		   &u32, 4);
	u64 = 12;
	save_patch("bad-kernel-attrs-req-dbuf", "kernel-attrs-req",
		   offsetof(struct ipc_sym_req, dbuf_id), &u64, 8);
	i32 = -2;
	save_patch("bad-kernel-attrs-below-unknown", "kernel-attrs",
		   offsetof(struct ipc_kernel_attrs, num_regs), &i32, 4);
	u32 = 2;
	save_patch("bad-global-flag-unknown", "global", offsetof(struct ipc_global_info, flags),
		   &u32, 4);
	/* Priorities and shares: a level above the highest, a share above 100 %, a default above
	 * the highest in gpuxd's policy, a share's note with no NUL. */
	i32 = IPC_PRIO_MAX + 1;
	save_patch("bad-queue-config-priority", "queue-config",
		   offsetof(struct ipc_queue_config, priority), &i32, 4);
	u32 = IPC_SHARE_MAX + 1;
	save_patch("bad-queue-config-share", "queue-config",
		   offsetof(struct ipc_queue_config, share), &u32, 4);
	save_patch("bad-welcome-priority-default", "welcome-priority",
		   offsetof(struct ipc_welcome, prio_default), "\3", 1);
	s = sample("status");
	memset(buf + sizeof(struct ipc_hdr) + sizeof(struct ipc_status) +
		       offsetof(struct ipc_dev_status, stats.sched.share_note),
	       's', IPC_SHARE_NOTE_MAX);
	save("bad-status-share-note-unterminated", 0, buf, s.len);

	/* One byte over the limit. */
	memset(buf, 0, sizeof(buf));
	test_msg_make(buf, IPC_DONE, 1, 0, NULL, 0);
	save("bad-oversized", 0, buf, IPC_MSG_MAX + 1);
	return 0;
}
