/* SPDX-License-Identifier: MIT */
/* tests/helpers.c: fd accounting, sample messages, loop and file helpers for the tests. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "channel.h"
#include "helpers.h"
#include "macro.h"
#include "ring.h"

int test_fd_count_of(pid_t pid)
{
	int n = proc_fd_count(pid);

	assert_true(n >= 0);
	return n;
}

int test_fd_count(void)
{
	return test_fd_count_of(getpid());
}

static void list_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *e;

	if (!d)
		return;
	while ((e = readdir(d))) {
		char path[PATH_MAX], target[PATH_MAX];
		ssize_t n;

		if (e->d_name[0] == '.' || atoi(e->d_name) == dirfd(d))
			continue;
		(void)snprintf(path, sizeof(path), "/proc/self/fd/%s", e->d_name);
		n = readlink(path, target, sizeof(target) - 1);
		target[n < 0 ? 0 : n] = '\0';
		print_message("  fd %s -> %s\n", e->d_name, target);
	}
	(void)closedir(d);
}

void test_assert_fd_count_at(int before, const char *file, int line)
{
	int now = test_fd_count();

	if (now == before)
		return;
	print_error("%d fds open, %d expected:\n", now, before);
	list_fds();
	_fail(file, line);
}

void test_assert_child_ok_at(pid_t pid, const char *file, int line)
{
	pid_t got;
	int st;

	got = waitpid(pid, &st, 0);
	if (got != pid)
		print_error("waitpid(%d) gave %d: %s\n", (int)pid, (int)got,
			    got < 0 ? strerror(errno) : "another child");
	else if (WIFSIGNALED(st))
		print_error("child %d killed by signal %d\n", (int)pid, WTERMSIG(st));
	else if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
		print_error("child %d exited with status %d\n", (int)pid, WEXITSTATUS(st));
	else
		return;
	_fail(file, line);
}

bool test_same_file(int a, int b)
{
	struct stat sa, sb;

	if (fstat(a, &sa) < 0 || fstat(b, &sb) < 0)
		return false;
	return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

bool test_fd_cloexec(int fd)
{
	int fl = fcntl(fd, F_GETFD);

	return fl >= 0 && (fl & FD_CLOEXEC);
}

void test_open_files(int *fds, unsigned n)
{
	for (unsigned i = 0; i < n; i++) {
		fds[i] = memfd_create("gpux-test", MFD_CLOEXEC);
		assert_true(fds[i] >= 0);
	}
}

void test_close_all(int *fds, unsigned n)
{
	for (unsigned i = 0; i < n; i++)
		fds[i] = safe_close(fds[i]);
}

/* ---- messages ---- */

size_t test_msg_make(void *buf, uint16_t type, uint32_t id, unsigned nfds, const void *payload,
		     size_t len)
{
	struct ipc_part part = { payload, len };
	int n = ipc_encode(buf, IPC_MSG_MAX, type, id, nfds, NULL, 0, &part, 1);

	assert_true(n > 0);
	return (size_t)n;
}

struct ipc_hdr test_hdr_get(const void *buf)
{
	struct ipc_hdr h;

	memcpy(&h, buf, sizeof(h));
	return h;
}

void test_hdr_set(void *buf, const struct ipc_hdr *h)
{
	memcpy(buf, h, sizeof(*h));
}

/* A device as the samples describe it, as a constant initializer (as written: clang-format
 * would take the braced initializer in a macro for a function's body). */
/* clang-format off */
#define SAMPLE_INFO(i)                                                                             \
	{                                                                                          \
		.index = (i), .backend = IPC_BACKEND_CUDA, .cc_major = 9, .cc_minor = 0,           \
		.sm_count = 132, .max_threads_per_block = 1024, .mem_total = 141ull * GiB,         \
		.uuid = { 0x10, 0x32, 0x54, 0x76, 0x98, 0xba, 0xdc, 0xfe, 1, 2, 3, 4, 5, 6, 7,     \
			  8 },                                                                     \
		.name = "NVIDIA H200 #" #i,                                                        \
	}
/* clang-format on */

static struct ipc_dev_status sample_dev_status(uint32_t index)
{
	static const struct ipc_device_info info[] = { SAMPLE_INFO(0), SAMPLE_INFO(1) };
	struct ipc_dev_status d = {
		.info = info[index],
		.state = IPC_DEVICE_READY,
		.pid = 4242 + index,
		.generation = 3,
		.restarts = 2,
		.deaths_recent = 1,
		.stats = { .requests_done = 1000 + index, .inflight = 2, .mem_free = 5 * GiB },
	};

	return d;
}

/* Scalar data that the samples' SCALAR arguments point into. */
static const uint8_t submit_data[] = { 0, 0, 0x80, 0x3f, 0x10, 0, 0, 0, 0xaa, 0xbb };

static const struct ipc_arg submit_args[] = {
	{ .kind = IPC_ARG_SCALAR, .offset = 0, .size = 4 },
	{ .kind = IPC_ARG_IN, .ref = 7, .offset = 0, .size = 4096 },
	{ .kind = IPC_ARG_OUT, .ref = 7, .offset = 4096, .size = 4096 },
	{ .kind = IPC_ARG_INOUT, .ref = 9, .offset = 1ull << 40, .size = 1 },
	{ .kind = IPC_ARG_SCALAR, .offset = 4, .size = 4 },
	{ .kind = IPC_ARG_SCALAR, .offset = 8, .size = 2 },
};

/* Two device buffer ranges, and a cached IN of frozen segment 8 (the seg-add-frozen sample). */
static const struct ipc_arg submit_dbuf_args[] = {
	{ .kind = IPC_ARG_DBUF, .ref = 11, .offset = 0, .size = 1 * MiB },
	{ .kind = IPC_ARG_IN, .flags = IPC_ARG_CACHED, .ref = 8, .offset = 0, .size = 4096 },
	{ .kind = IPC_ARG_DBUF, .ref = 12, .offset = 4096, .size = 4096 },
	{ .kind = IPC_ARG_SCALAR, .offset = 0, .size = 4 },
};

/* form 0: saxpy with buffers and scalars; 1: no arguments; 2: device buffers, a cached IN. */
static int sample_submit(void *buf, size_t cap, unsigned form)
{
	static const struct {
		const char *name;
		const struct ipc_arg *args;
		uint32_t nargs;
	} forms[] = {
		{ "saxpy", submit_args, ARRAY_SIZE(submit_args) },
		{ "empty", NULL, 0 },
		{ "stencil", submit_dbuf_args, ARRAY_SIZE(submit_dbuf_args) },
	};
	uint32_t nargs = forms[form].nargs;
	struct ipc_submit m = {
		.mod_id = 3,
		.queue = 1,
		.nargs = nargs,
		.grid = { 128, 2, 1 },
		.block = { 256, 1, 1 },
		.shared_bytes = 1024,
		.timeout_ms = 5000,
		.data_len = nargs ? sizeof(submit_data) : 0,
	};

	return ipc_encode_submit(buf, cap, 200, &m, forms[form].args, forms[form].name,
				 submit_data);
}

static int sample_mod_load(void *buf, size_t cap, unsigned form)
{
	static const char code[] = "extern \"C\" __global__ void k(float *x) { x[0] = 1; }";
	static const char opts[] = "--use_fast_math -DN=4";
	struct ipc_mod_load m = { .mod_id = 3, .lang = IPC_LANG_CUDA };

	if (form == 0) {
		m.options_len = sizeof(opts) - 1;
		m.code_len = sizeof(code) - 1;
		return ipc_encode_mod_load(buf, cap, 300, &m, opts, code);
	}
	if (form == 1) {
		m.lang = IPC_LANG_CUBIN;
		m.flags = IPC_MOD_CODE_FD;
		m.code_len = 1 << 20;
		return ipc_encode_mod_load(buf, cap, 301, &m, NULL, NULL);
	}
	if (form == 2) {
		m.lang = IPC_LANG_HOST;
		m.code_len = sizeof(code) - 1;
		return ipc_encode_mod_load(buf, cap, 302, &m, NULL, code);
	}
	/* Code, then a header "v.h" and the name expression "k<int>" (ipc/proto.h). */
	{
		static const uint8_t extra[] = "\3\0\0\0\x0a\0\0\0v.hint v = 1;"
					       "\6\0\0\0k<int>";
		uint8_t all[sizeof(code) - 1 + sizeof(extra) - 1];

		memcpy(all, code, sizeof(code) - 1);
		memcpy(all + sizeof(code) - 1, extra, sizeof(extra) - 1);
		m.code_len = sizeof(code) - 1;
		m.extra_len = sizeof(extra) - 1;
		m.nheaders = 1;
		m.nnames = 1;
		return ipc_encode_mod_load(buf, cap, 303, &m, NULL, all);
	}
}

/* form 0: a success; 1: a failure with its text. */
static int sample_done(void *buf, size_t cap, unsigned form)
{
	struct ipc_done ok = { IPC_OK, 0, 1000, 20000, 15000 };
	struct ipc_done failed = { IPC_E_COMPILE, 0, 10, 0, 0 };

	if (form == 0)
		return ipc_encode_done(buf, cap, 200, &ok, NULL);
	return ipc_encode_done(buf, cap, 300, &failed,
			       "k.cu(1): error: identifier \"y\" is undefined");
}

/* A page of `ndevices` devices (0 to 2). */
static int sample_status(void *buf, size_t cap, unsigned ndevices)
{
	struct ipc_dev_status devs[2] = { sample_dev_status(0), sample_dev_status(1) };
	struct ipc_status m = {
		.ndevices = ndevices,
		.nclients = 5,
		.uptime_ns = 123 * NSEC_PER_SEC,
		.clients_total = 77,
		.clients_refused = 1,
		.loop = "io_uring",
		.version = "0.1.0",
		.count = ndevices,
	};

	return ipc_encode_status(buf, cap, 400, &m, devs);
}

/* A page of `n` clients (0 to 2) of 3. */
static int sample_clients(void *buf, size_t cap, unsigned n)
{
	static const struct ipc_client_info rows[2] = {
		{ .id = 7,
		  .pid = 4321,
		  .uid = 1000,
		  .connected_ns = 90 * NSEC_PER_SEC,
		  .requests = 123456,
		  .shared_bytes = 12 * MiB,
		  .device_bytes = 1 * GiB,
		  .inflight = 16,
		  .channels = 2 },
		{ .id = 9,
		  .pid = 4400,
		  .uid = 1001,
		  .connected_ns = 2 * NSEC_PER_SEC,
		  .requests = 1,
		  .shared_bytes = 4096,
		  .inflight = 0,
		  .channels = 1 },
	};
	struct ipc_clients m = { .total = 3, .count = n };

	return ipc_encode_clients(buf, cap, 500, &m, rows);
}

/*
 * The samples: a FIXED message's fixed part (encoded by the schema's encoder, id 100 + its
 * type), an EMPTY one's type, or a VAR one's builder and its form. The fds each travels with
 * are the schema's: whatever its encoder announced.
 */
struct sample_def {
	const char *name;
	uint16_t type;
	const void *fixed;
	size_t size;
	int (*build)(void *buf, size_t cap, unsigned form);
	unsigned form;
};

/* clang-format takes a braced initializer in a macro for a function's body: kept as written. */
/* clang-format off */
#define FIXED(name_, T, st, ...)                                                                   \
	{ .name = (name_), .type = IPC_##T, .fixed = &(const struct st){ __VA_ARGS__ },            \
	  .size = sizeof(struct st) }
#define EMPTY(name_, T) { .name = (name_), .type = IPC_##T }
#define BUILT(name_, T, fn, form_)                                                                 \
	{ .name = (name_), .type = IPC_##T, .build = (fn), .form = (form_) }
/* clang-format on */

/* Append only: test-ipc-proto-parse picks some by number, and tests/fuzz/corpus has them. */
static const struct sample_def samples[] = {
	FIXED("hello", HELLO, ipc_hello, .min_version = IPC_VERSION_MIN,
	      .max_version = IPC_VERSION),
	FIXED("hello-admin", HELLO, ipc_hello, 1, 1, IPC_HELLO_ADMIN, 0),
	FIXED("welcome", WELCOME, ipc_welcome, IPC_VERSION, 2, 0x1122334455667788ull, 1ull << 34,
	      IPC_WELCOME_PRIVATE, 0, 0, 0),
	FIXED("device", DEVICE, ipc_device, SAMPLE_INFO(1), IPC_DEVICE_FAILED, 7, 0, 0),
	FIXED("device-channel", DEVICE, ipc_device, SAMPLE_INFO(0), IPC_DEVICE_READY, 1,
	      IPC_DEVICE_CHANNEL, 0),
	FIXED("attach", ATTACH, ipc_attach, 0x1122334455667788ull, 1000, 1000, 4321, 0, 0, 0),
	FIXED("ready", READY, ipc_ready, SAMPLE_INFO(0)),
	FIXED("seg-add", SEG_ADD, ipc_seg_add, 7, 2 * MiB, 0, 0),
	FIXED("seg-add-frozen", SEG_ADD, ipc_seg_add, 8, 4096, IPC_SEG_FROZEN, 0),
	FIXED("seg-drop", SEG_DROP, ipc_seg_drop, 7),
	BUILT("mod-load-inline", MOD_LOAD, sample_mod_load, 0),
	BUILT("mod-load-fd", MOD_LOAD, sample_mod_load, 1),
	BUILT("mod-load-no-options", MOD_LOAD, sample_mod_load, 2),
	FIXED("mod-drop", MOD_DROP, ipc_mod_drop, 3),
	BUILT("submit", SUBMIT, sample_submit, 0),
	BUILT("submit-no-args", SUBMIT, sample_submit, 1),
	BUILT("done", DONE, sample_done, 0),
	BUILT("done-text", DONE, sample_done, 1),
	FIXED("status-req", STATUS_REQ, ipc_status_req, 0, 0),
	BUILT("status", STATUS, sample_status, 2),
	BUILT("status-no-devices", STATUS, sample_status, 0),
	FIXED("killed", KILLED, ipc_killed, 1, IPC_KILL_TIMEOUT, 200, 3),
	FIXED("queue-open", QUEUE_OPEN, ipc_queue_msg, 5, 0),
	FIXED("queue-close", QUEUE_CLOSE, ipc_queue_msg, 5, 0),
	FIXED("dbuf-alloc", DBUF_ALLOC, ipc_dbuf_alloc, .dbuf_id = 11, .size = 64 * MiB),
	FIXED("dbuf-free", DBUF_FREE, ipc_dbuf_free, 11),
	FIXED("copy-to-dbuf", COPY, ipc_copy, .dbuf_id = 11, .dbuf_offset = 4096, .seg_id = 7,
	      .seg_offset = 0, .size = 4096, .dir = IPC_COPY_TO_DBUF, .queue = 1),
	FIXED("copy-from-dbuf", COPY, ipc_copy, .dbuf_id = 12, .seg_id = 7, .seg_offset = 1 * MiB,
	      .size = 1 * MiB, .dir = IPC_COPY_FROM_DBUF),
	BUILT("submit-dbuf-cached", SUBMIT, sample_submit, 2),
	FIXED("rings", RINGS, ipc_rings_offer, .size = IPC_RINGS_BYTES),
	EMPTY("kick", KICK),
	FIXED("channel-req", CHANNEL_REQ, ipc_channel_req, .device = 3),
	BUILT("mod-load-headers", MOD_LOAD, sample_mod_load, 3),
	EMPTY("drain", DRAIN),
	FIXED("mod-info", MOD_INFO, ipc_mod_info, 0x0123456789abcdefull, 0xfedcba9876543210ull,
	      23000000, IPC_MOD_COMPILED, 0),
	FIXED("clients-req", CLIENTS_REQ, ipc_clients_req, .after = 41),
	BUILT("clients", CLIENTS, sample_clients, 2),
	BUILT("clients-none", CLIENTS, sample_clients, 0),
	FIXED("adopt", ADOPT, ipc_adopt, 0x1122334455667788ull, 4322, 0),
	FIXED("kernel-attrs-req", KERNEL_ATTRS_REQ, ipc_sym_req, .mod_id = 3, .name_len = 5,
	      .name = "saxpy"),
	FIXED("kernel-attrs", KERNEL_ATTRS, ipc_kernel_attrs, 1024, 32, 2048, 64, 16, 98304, 80, 90,
	      0, IPC_ATTR_UNKNOWN, 5, { 0 }),
	FIXED("global-req", GLOBAL_REQ, ipc_sym_req, .mod_id = 3, .dbuf_id = 12, .name_len = 10,
	      .name = "ns::coeffs"),
	FIXED("global", GLOBAL, ipc_global_info, .size = 64, .flags = IPC_GLOBAL_READ_ONLY),
	FIXED("marks", MARKS, ipc_marks_offer, .index = 17),
	FIXED("dbuf-host", DBUF_HOST, ipc_dbuf_host, .dbuf_id = 13, .size = 1 * MiB, .seg_id = 7,
	      .seg_offset = 4096),
	FIXED("queue-config", QUEUE_CONFIG, ipc_queue_config, .queue = 5, .priority = IPC_PRIO_MAX,
	      .share = 25, .flags = IPC_QUEUE_PRIORITY),
	FIXED("queue-config-default", QUEUE_CONFIG, ipc_queue_config, .queue = 0, .share = 50),
	FIXED("welcome-priority", WELCOME, ipc_welcome, .version = IPC_VERSION, .ndevices = 1,
	      .client_id = 9, .prio_max = IPC_PRIO_MAX, .prio_default = 1),
	FIXED("attach-priority", ATTACH, ipc_attach, .client_id = 9, .uid = 1001, .gid = 1001,
	      .pid = 77, .prio_max = 1, .prio_default = IPC_PRIO_MIN),
};

/* A FIXED or EMPTY sample, through the schema's encoder of its type. */
static int sample_encode(const struct sample_def *d, void *buf, size_t cap)
{
	uint32_t id = 100u + d->type;

	switch (d->type) {
#define SAMPLE_FIXED_(T, name, fx)                                                                 \
	case IPC_##T:                                                                              \
		assert_int_equal(d->size, sizeof(struct ipc_##fx));                                \
		return ipc_encode_##name(buf, cap, id, d->fixed);
#define SAMPLE_EMPTY_(T, name, fx)                                                                 \
	case IPC_##T:                                                                              \
		assert_null(d->fixed);                                                             \
		return ipc_encode_##name(buf, cap, id);
#define SAMPLE_VAR_(T, name, fx)
#define SAMPLE_ENCODE_(T, num, name, label, fx, decoded, fds, shape) SAMPLE_##shape##_(T, name, fx)
		IPC_MESSAGES(SAMPLE_ENCODE_)
	}
	fail_msg("sample %s: a message with parts of its own needs a builder", d->name);
	return -EINVAL;
}

bool test_msg_sample(unsigned i, void *buf, size_t cap, struct test_sample *ret)
{
	const struct sample_def *d;
	int n;

	if (i >= ARRAY_SIZE(samples))
		return false;
	d = &samples[i];
	n = d->build ? d->build(buf, cap, d->form) : sample_encode(d, buf, cap);
	assert_true(n > 0);
	*ret = (struct test_sample){
		.name = d->name,
		.type = d->type,
		.nfds = test_hdr_get(buf).nfds,
		.len = (size_t)n,
	};
	return true;
}

/* ---- event loops ---- */

bool test_uring_available(void)
{
	static int known = -1;

	if (known < 0) {
		struct ipc_loop *l;

		known = ipc_loop_new(IPC_LOOP_URING, &l) == 0;
		if (known)
			ipc_loop_free(l);
	}
	return known;
}

bool test_loop_until(struct ipc_loop *l, const unsigned *count, unsigned want, unsigned timeout_ms)
{
	uint64_t until = mono_ns() + timeout_ms * NSEC_PER_MSEC;

	while (*count < want) {
		uint64_t now = mono_ns();

		if (now >= until)
			break;
		assert_int_equal(ipc_loop_iterate(l, (int64_t)MIN(until - now, 10 * NSEC_PER_MSEC)),
				 0);
	}
	return *count >= want;
}

void test_loop_spin(struct ipc_loop *l, unsigned ms)
{
	unsigned never = 0;

	(void)test_loop_until(l, &never, 1, ms);
}

ssize_t test_loop_recv(struct ipc_loop *l, int sock, void *buf, size_t cap, int *fds,
		       unsigned *ret_nfds, unsigned timeout_ms)
{
	uint64_t until = mono_ns() + timeout_ms * NSEC_PER_MSEC;

	for (;;) {
		ssize_t n = ipc_channel_recv(sock, buf, cap, fds, ret_nfds, MSG_DONTWAIT);

		if (n != -EAGAIN || mono_ns() >= until)
			return n;
		assert_int_equal(ipc_loop_iterate(l, 1 * NSEC_PER_MSEC), 0);
	}
}

/* ---- files and sockets ---- */

uint8_t *test_read_file(const char *path, size_t *ret_len)
{
	struct stat st;
	uint8_t *p = NULL;
	int fd = open(path, O_RDONLY | O_CLOEXEC);

	if (fd < 0)
		return NULL;
	if (fstat(fd, &st) == 0 && (p = malloc(st.st_size ? (size_t)st.st_size : 1)) &&
	    read(fd, p, (size_t)st.st_size) != st.st_size) {
		free(p);
		p = NULL;
	}
	(void)close(fd);
	if (p)
		*ret_len = (size_t)st.st_size;
	return p;
}

char *test_mkdtemp(void)
{
	const char *base = getenv("TMPDIR");
	char *path;

	if (!base || !*base)
		base = "/tmp";
	assert_true(asprintf(&path, "%s/gpux-test-XXXXXX", base) > 0);
	assert_non_null(mkdtemp(path));
	return path;
}

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	return remove(path) < 0 ? -1 : 0;
}

void test_rmtree(const char *path)
{
	assert_int_equal(nftw(path, rm_one, 16, FTW_DEPTH | FTW_PHYS), 0);
}

static struct sockaddr_un unix_addr(const char *path)
{
	struct sockaddr_un a = { .sun_family = AF_UNIX };

	assert_true(strlen(path) < sizeof(a.sun_path));
	memcpy(a.sun_path, path, strlen(path) + 1);
	return a;
}

int test_listen_unix(const char *path)
{
	struct sockaddr_un a = unix_addr(path);
	int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);

	assert_true(fd >= 0);
	assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
	assert_int_equal(listen(fd, 64), 0);
	return fd;
}

int test_connect_unix(const char *path)
{
	struct sockaddr_un a = unix_addr(path);
	int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);

	if (fd < 0)
		return -errno;
	if (connect(fd, (struct sockaddr *)&a, sizeof(a)) < 0) {
		int r = -errno;
		(void)close(fd);
		return r;
	}
	return fd;
}

void test_send_raw(int sock, const void *buf, size_t len, const int *fds, unsigned nfds)
{
	union {
		char buf[CMSG_SPACE(sizeof(int) * TEST_RAW_FDS_MAX)];
		struct cmsghdr align;
	} control;
	struct iovec iov = { (void *)buf, len };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };

	assert_true(nfds <= TEST_RAW_FDS_MAX);
	if (nfds) {
		struct cmsghdr *c;

		memset(&control, 0, sizeof(control));
		mh.msg_control = control.buf;
		mh.msg_controllen = CMSG_SPACE(sizeof(int) * nfds);
		c = CMSG_FIRSTHDR(&mh);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(sizeof(int) * nfds);
		memcpy(CMSG_DATA(c), fds, sizeof(int) * nfds);
	}
	assert_int_equal(sendmsg(sock, &mh, MSG_NOSIGNAL), (ssize_t)len);
}

ssize_t test_recv_wait(int sock, void *buf, size_t cap, int *fds, unsigned *ret_nfds,
		       unsigned timeout_ms)
{
	struct pollfd p = { .fd = sock, .events = POLLIN };

	if (poll(&p, 1, (int)timeout_ms) == 0) {
		*ret_nfds = 0;
		return -EAGAIN;
	}
	return ipc_channel_recv(sock, buf, cap, fds, ret_nfds, MSG_DONTWAIT);
}

uint64_t test_random_next(uint64_t *seed)
{
	uint64_t z = (*seed += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

void test_random_fill(void *buf, size_t len, uint64_t seed)
{
	uint8_t *p = buf;

	while (len > 0) {
		uint64_t z = test_random_next(&seed);
		size_t k = MIN(len, sizeof(z));

		memcpy(p, &z, k);
		p += k;
		len -= k;
	}
}
