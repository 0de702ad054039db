/* SPDX-License-Identifier: MIT */
/* tests/test-e2e-symbols.c: kernels' attributes and modules' variables, on the host back end or CUDA. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "channel.h"
#include "e2e.h"
#include "helpers.h"
#include "segment.h"

/*
 * gpux_kernel_attrs() and gpux_module_global(), as a client uses them, where TEST_BACKEND says
 * as this file is built: "host" (e2e-symbols: C and CUDA C++ on the CPU, and a client that
 * speaks the protocol itself), or "cuda" (e2e-symbols-cuda on the fake driver, whose NVRTC
 * cubins carry the variables and whose attributes are its own numbers; gpu-symbols on a GPU,
 * where the kernels run too; each exits 77 where it cannot run).
 */

struct env {
	struct test_daemon d;
	gpux_ctx *ctx;
	bool host;
	bool fake; /* the fake driver: kernels other than its own do not run */
};

static int setup(void **state)
{
	struct env *e = calloc(1, sizeof(*e));
	const char *args[] = { "--backend", TEST_BACKEND, NULL };

	assert_non_null(e);
	e->host = strcmp(TEST_BACKEND, "host") == 0;
	e->fake = !e->host && getenv("GPUX_CUDA_LIB");
	test_daemon_start(&e->d, args);
	e->ctx = test_connect(&e->d);
	*state = e;
	return 0;
}

static int teardown(void **state)
{
	struct env *e = *state;

	gpux_disconnect(e->ctx);
	test_daemon_stop(&e->d);
	free(e);
	return 0;
}

/* ---- helpers ---- */

static gpux_module *load(struct env *e, uint32_t lang, const char *src)
{
	gpux_module *m = NULL;
	char *log = NULL;
	gpux_status st = gpux_module_load(e->ctx, lang, src, strlen(src), NULL, &m, &log);

	if (st != GPUX_OK)
		fail_msg("compile: %s\n%s", gpux_strerror(st), log ? log : "");
	free(log);
	return m;
}

static gpux_buf *buf_new(struct env *e, size_t size)
{
	gpux_buf *b = NULL;

	assert_int_equal(gpux_buf_alloc(e->ctx, size, &b), GPUX_OK);
	return b;
}

static gpux_status copy(bool to_dbuf, gpux_dbuf *d, uint64_t d_off, gpux_buf *b, uint64_t size)
{
	gpux_req *r = NULL;
	gpux_status st = to_dbuf ? gpux_dbuf_write(d, d_off, b, 0, size, NULL, &r)
				 : gpux_dbuf_read(b, 0, d, d_off, size, NULL, &r);

	if (st != GPUX_OK)
		return st;
	st = gpux_wait(r, -1);
	gpux_req_free(r);
	return st;
}

/* The variable `name` of m, its size checked; its bytes read into out (size bytes). */
static gpux_dbuf *global_read(struct env *e, gpux_module *m, const char *name, size_t size,
			      void *out)
{
	gpux_dbuf *d = NULL;
	gpux_buf *b = buf_new(e, size);
	gpux_status st = gpux_module_global(m, name, GPUX_ANY, &d);

	if (st != GPUX_OK)
		fail_msg("variable %s: %s", name, gpux_strerror(st));
	assert_int_equal(gpux_dbuf_size(d), size);
	assert_int_equal(gpux_dbuf_device(d), 0);
	assert_int_equal(copy(false, d, 0, b, size), GPUX_OK);
	memcpy(out, gpux_buf_data(b), size);
	gpux_buf_free(b);
	return d;
}

static gpux_status global_write(struct env *e, gpux_dbuf *d, uint64_t off, const void *v,
				size_t size)
{
	gpux_buf *b = buf_new(e, size);
	gpux_status st;

	memcpy(gpux_buf_data(b), v, size);
	st = copy(true, d, off, b, size);
	gpux_buf_free(b);
	return st;
}

/* ---- CUDA C++, on either back end ---- */

static const char cuda_src[] =
	"__constant__ float coeffs[4] = { 1, 2, 3, 4 };\n"
	"__device__ unsigned long long counter;\n"
	"namespace ns { __device__ double scale = 2.5; }\n"
	"__device__ int a1 = 1, a2[2] = { 5, 6 };\n"
	"struct pair { int a, b; };\n"
	"static __device__ pair p_var = { 9, 10 };\n"
	"__device__ float twice(float x) { return 2 * x; }\n"
	"extern \"C\" __global__ void apply(float *y, unsigned n)\n"
	"{\n"
	"	unsigned i = blockIdx.x * blockDim.x + threadIdx.x;\n"
	"	if (i < n)\n"
	"		y[i] = twice(coeffs[i % 4]) * (float)ns::scale + a1 + a2[1] + p_var.a;\n"
	"	if (i == 0)\n"
	"		atomicAdd(&counter, 1ull);\n"
	"}\n";

/* A kernel of another module, that a variable reaches as a pointer. */
static const char cuda_sum_src[] =
	"extern \"C\" __global__ void sum2(const int *p, int *out) { out[0] = p[0] + p[1]; }\n";

static void test_symbols_cuda_kernel_attrs(void **state)
{
	struct env *e = *state;
	gpux_module *m = load(e, GPUX_LANG_CUDA, cuda_src);
	struct gpux_kernel_attrs a;

	memset(&a, 0x55, sizeof(a));
	assert_int_equal(gpux_kernel_attrs(m, "apply", GPUX_ANY, &a), GPUX_OK);
	assert_int_equal(a.max_threads_per_block, 1024);
	assert_int_equal(a.nparams, 2);
	for (unsigned i = 0; i < 5; i++)
		assert_int_equal(a.reserved[i], 0);
	if (e->host) {
		/* What the CPU has no notion of is unknown, not made up. */
		assert_int_equal(a.max_dynamic_shared_size_bytes, 64 * 1024);
		assert_int_equal(a.num_regs, GPUX_ATTR_UNKNOWN);
		assert_int_equal(a.shared_size_bytes, GPUX_ATTR_UNKNOWN);
		assert_int_equal(a.ptx_version, GPUX_ATTR_UNKNOWN);
		assert_int_equal(a.binary_version, GPUX_ATTR_UNKNOWN);
		assert_int_equal(a.local_size_bytes, GPUX_ATTR_UNKNOWN);
	} else if (e->fake) {
		/* The fake driver's own numbers (tests/fake-cuda), each in its field. */
		assert_int_equal(a.num_regs, 23);
		assert_int_equal(a.shared_size_bytes, 0);
		assert_int_equal(a.const_size_bytes, 44);
		assert_int_equal(a.local_size_bytes, 8);
		assert_int_equal(a.ptx_version, 80);
		assert_int_equal(a.binary_version, 90);
		assert_int_equal(a.cache_mode_ca, 1);
		assert_int_equal(a.preferred_shared_memory_carveout, 25);
		assert_int_equal(a.max_dynamic_shared_size_bytes, 227 * 1024);
	} else {
		assert_true(a.num_regs > 0 && a.num_regs <= 255);
		assert_true(a.binary_version >= 50 && a.ptx_version >= 50);
		assert_true(a.max_dynamic_shared_size_bytes >= 48 * 1024);
		assert_true(a.const_size_bytes >= 0 && a.local_size_bytes >= 0);
	}
	/* A kernel by its C++ name, like a launch's. */
	assert_int_equal(gpux_kernel_attrs(m, "nope", 0, &a), GPUX_E_NOTFOUND);
	assert_int_equal(gpux_kernel_attrs(m, "", 0, &a), GPUX_E_INVAL);
	assert_int_equal(gpux_kernel_attrs(m, "apply", 1000, &a), GPUX_E_NODEV);
	gpux_module_free(m);
}

static void test_symbols_cuda_globals(void **state)
{
	struct env *e = *state;
	gpux_module *m = load(e, GPUX_LANG_CUDA, cuda_src);
	gpux_module *sum = load(e, GPUX_LANG_CUDA, cuda_sum_src);
	float coeffs[4], nc[4] = { 10, 20, 30, 40 };
	int a2[2], pv[2], out = 0;
	double scale, scale2;
	uint64_t counter;
	gpux_dbuf *dc, *ds, *ds2, *dn, *da2, *dp, *d = NULL;
	gpux_buf *y, *o;
	uint32_t n = 8;

	dc = global_read(e, m, "coeffs", sizeof(coeffs), coeffs);
	assert_true(coeffs[0] == 1 && coeffs[3] == 4);
	/* A qualified name, and its symbol. */
	ds = global_read(e, m, "ns::scale", sizeof(scale), &scale);
	assert_true(scale == 2.5);
	ds2 = global_read(e, m, "_ZN2ns5scaleE", sizeof(scale2), &scale2);
	assert_true(scale2 == 2.5);
	dn = global_read(e, m, "counter", sizeof(counter), &counter);
	assert_int_equal(counter, 0);
	da2 = global_read(e, m, "a2", sizeof(a2), a2);
	assert_int_equal(a2[1], 6);
	dp = global_read(e, m, "p_var", sizeof(pv), pv);
	assert_int_equal(pv[0], 9);

	/* A function, or nothing, is no variable; a name too long is refused before it goes. */
	assert_int_equal(gpux_module_global(m, "twice", 0, &d), GPUX_E_NOTFOUND);
	assert_int_equal(gpux_module_global(m, "apply", 0, &d), GPUX_E_NOTFOUND);
	assert_int_equal(gpux_module_global(m, "nope::scale", 0, &d), GPUX_E_NOTFOUND);
	{
		char longname[300];

		memset(longname, 'x', sizeof(longname) - 1);
		longname[sizeof(longname) - 1] = 0;
		assert_int_equal(gpux_module_global(m, longname, 0, &d), GPUX_E_INVAL);
	}
	assert_null(d);

	/* Written, then read by the module's kernel in the queue's order. */
	assert_int_equal(global_write(e, dc, 0, nc, sizeof(nc)), GPUX_OK);
	/* Nothing past the variable's end. */
	assert_int_equal(global_write(e, dc, 8, nc, sizeof(nc)), GPUX_E_INVAL);
	memset(coeffs, 0, sizeof(coeffs));
	{
		gpux_buf *b = buf_new(e, sizeof(coeffs));

		assert_int_equal(copy(false, dc, 0, b, sizeof(coeffs)), GPUX_OK);
		memcpy(coeffs, gpux_buf_data(b), sizeof(coeffs));
		gpux_buf_free(b);
	}
	assert_true(coeffs[0] == 10 && coeffs[3] == 40);

	y = buf_new(e, n * sizeof(float));
	{
		struct gpux_arg args[] = { gpux_arg_inout(y, 0, n * sizeof(float)),
					   GPUX_ARG_VALUE(n) };
		struct gpux_launch l = { .grid = { 1, 1, 1 }, .block = { n, 1, 1 } };

		assert_int_equal(gpux_run(m, "apply", &l, args, 2), GPUX_OK);
	}
	if (!e->fake) {
		const float *yv = gpux_buf_data(y);

		for (uint32_t i = 0; i < n; i++)
			assert_true(fabsf(yv[i] - (2 * nc[i % 4] * 2.5f + 1 + 6 + 9)) < 1e-4f);
		assert_int_equal(copy(false, dn, 0, y, sizeof(counter)), GPUX_OK);
		memcpy(&counter, gpux_buf_data(y), sizeof(counter));
		assert_int_equal(counter, 1);

		/* A variable as another module's kernel argument: its address. */
		o = buf_new(e, sizeof(int));
		{
			struct gpux_arg args[] = { gpux_arg_dbuf(da2, 0, sizeof(a2)),
						   gpux_arg_out(o, 0, sizeof(int)) };
			struct gpux_launch l = { .grid = { 1, 1, 1 }, .block = { 1, 1, 1 } };

			assert_int_equal(gpux_run(sum, "sum2", &l, args, 2), GPUX_OK);
		}
		memcpy(&out, gpux_buf_data(o), sizeof(out));
		assert_int_equal(out, 11);
		gpux_buf_free(o);
	}
	gpux_buf_free(y);

	/* The device buffer keeps the module's variable after the module is let go of. */
	gpux_module_free(m);
	assert_int_equal(global_write(e, ds, 0, &(double){ 7.5 }, sizeof(double)), GPUX_OK);
	assert_int_equal(copy(false, ds2, 0, (y = buf_new(e, 8)), 8), GPUX_OK);
	memcpy(&scale, gpux_buf_data(y), sizeof(scale));
	assert_true(scale == 7.5);
	gpux_buf_free(y);
	gpux_dbuf_free(dc);
	gpux_dbuf_free(ds);
	gpux_dbuf_free(ds2);
	gpux_dbuf_free(dn);
	gpux_dbuf_free(da2);
	gpux_dbuf_free(dp);
	gpux_module_free(sum);
}

/* ---- C for the host back end ---- */

static const char host_src[] = "GPUX_HOST_GLOBAL float coeffs[4] = { 1, 2, 3, 4 };\n"
			       "GPUX_HOST_GLOBAL const int limit = 7;\n"
			       "GPUX_HOST_GLOBAL uint64_t counter;\n"
			       "float hidden = 5;\n"
			       "GPUX_HOST_KERNEL(apply)\n"
			       "{\n"
			       "	float *y = GPUX_ARG(float *, 0);\n"
			       "	GPUX_FOR_EACH_THREAD(t)\n"
			       "		y[t.x] *= coeffs[t.x % 4] + limit;\n"
			       "	__atomic_fetch_add(&counter, 1, __ATOMIC_RELAXED);\n"
			       "}\n"
			       "GPUX_HOST_PARAMS(apply, sizeof(float *));\n";

static void test_symbols_host_c(void **state)
{
	struct env *e = *state;
	gpux_module *m;
	struct gpux_kernel_attrs a;
	gpux_dbuf *dc, *dl, *d = NULL;
	float coeffs[4], nc[4] = { 10, 20, 30, 40 };
	int limit;
	gpux_buf *y;

	if (!e->host)
		skip();
	m = load(e, GPUX_LANG_HOST, host_src);
	assert_int_equal(gpux_kernel_attrs(m, "apply", 0, &a), GPUX_OK);
	assert_int_equal(a.max_threads_per_block, 1024);
	assert_int_equal(a.nparams, 1);
	assert_int_equal(a.shared_size_bytes, 0);
	assert_int_equal(a.max_dynamic_shared_size_bytes, 1024 * 1024);
	assert_int_equal(a.num_regs, GPUX_ATTR_UNKNOWN);
	/* A variable is no kernel, nor gpux's own table of a kernel's parameters. */
	assert_int_equal(gpux_kernel_attrs(m, "coeffs", 0, &a), GPUX_E_NOTFOUND);

	dc = global_read(e, m, "coeffs", sizeof(coeffs), coeffs);
	assert_true(coeffs[1] == 2);
	dl = global_read(e, m, "limit", sizeof(limit), &limit);
	assert_int_equal(limit, 7);
	/* Read-only memory stays so: refused by the library, and by the worker (below). */
	assert_int_equal(global_write(e, dl, 0, &limit, sizeof(limit)), GPUX_E_INVAL);
	/* Not exported, gpux's own, a kernel, libc's: none is the client's variable. */
	assert_int_equal(gpux_module_global(m, "hidden", 0, &d), GPUX_E_NOTFOUND);
	assert_int_equal(gpux_module_global(m, "gpux_params_apply", 0, &d), GPUX_E_NOTFOUND);
	assert_int_equal(gpux_module_global(m, "apply", 0, &d), GPUX_E_NOTFOUND);
	assert_int_equal(gpux_module_global(m, "environ", 0, &d), GPUX_E_NOTFOUND);
	assert_int_equal(gpux_module_global(m, "stdout", 0, &d), GPUX_E_NOTFOUND);
	assert_null(d);

	assert_int_equal(global_write(e, dc, 0, nc, sizeof(nc)), GPUX_OK);
	y = buf_new(e, 8 * sizeof(float));
	for (unsigned i = 0; i < 8; i++)
		((float *)gpux_buf_data(y))[i] = 1;
	{
		struct gpux_arg args[] = { gpux_arg_inout(y, 0, 8 * sizeof(float)) };
		struct gpux_launch l = { .grid = { 1, 1, 1 }, .block = { 8, 1, 1 } };

		assert_int_equal(gpux_run(m, "apply", &l, args, 1), GPUX_OK);
	}
	for (unsigned i = 0; i < 8; i++)
		assert_true(((float *)gpux_buf_data(y))[i] == nc[i % 4] + 7);
	gpux_buf_free(y);
	gpux_dbuf_free(dc);
	gpux_dbuf_free(dl);
	gpux_module_free(m);
}

/* A question about a module that a device has not built yet waits for its build there. */
static void test_symbols_wait_for_the_build(void **state)
{
	struct env *e = *state;
	static const char *const args[] = { NULL };
	struct test_daemon d2;
	gpux_ctx *ctx;
	gpux_module *m = NULL;
	gpux_dbuf *d = NULL;
	struct gpux_kernel_attrs a;

	if (!e->host)
		skip();
	setenv("GPUX_HOST_DEVICES", "2", 1);
	test_daemon_start(&d2, args);
	unsetenv("GPUX_HOST_DEVICES");
	ctx = test_connect(&d2);
	assert_int_equal(gpux_device_count(ctx), 2);
	assert_int_equal(
		gpux_module_load(ctx, GPUX_LANG_HOST, host_src, strlen(host_src), NULL, &m, NULL),
		GPUX_OK);
	/* Device 1 gets the module with the question, and builds it meanwhile. */
	assert_int_equal(gpux_module_global(m, "counter", 1, &d), GPUX_OK);
	assert_int_equal(gpux_dbuf_device(d), 1);
	assert_int_equal(gpux_dbuf_size(d), 8);
	assert_int_equal(gpux_kernel_attrs(m, "apply", 1, &a), GPUX_OK);
	assert_int_equal(a.nparams, 1);
	gpux_dbuf_free(d);
	gpux_module_free(m);
	gpux_disconnect(ctx);
	test_daemon_stop(&d2);
}

/* ---- a client that speaks the protocol itself ---- */

static int raw_recv(int chan, uint8_t *buf, struct ipc_msg *msg, uint32_t id)
{
	assert_int_equal(ipc_channel_recv_msg(chan, buf, IPC_MSG_MAX, msg, 0), 1);
	assert_int_equal(msg->hdr.id, id);
	return msg->hdr.type;
}

/* A question's answer: the info message when it succeeds, then the DONE's status. */
static int raw_ask(int chan, uint16_t type, uint32_t id, uint64_t mod_id, uint64_t dbuf_id,
		   const char *name, void *ret_info, size_t info_len)
{
	static uint8_t buf[IPC_MSG_MAX];
	struct ipc_sym_req q = { .mod_id = mod_id, .dbuf_id = dbuf_id };
	struct ipc_done_msg done;
	struct ipc_msg msg;
	int n;

	q.name_len = (uint32_t)strlen(name);
	memcpy(q.name, name, q.name_len + 1);
	n = ipc_encode(buf, sizeof(buf), type, id, 0, &q, sizeof(q), NULL, 0);
	assert_int_equal(ipc_channel_send(chan, buf, (size_t)n, NULL, 0, 0), 0);
	if (raw_recv(chan, buf, &msg, id) != IPC_DONE) {
		assert_int_equal(msg.len, info_len);
		memcpy(ret_info, msg.payload, info_len);
		raw_recv(chan, buf, &msg, id);
	}
	assert_int_equal(ipc_decode_done(&msg, &done), 0);
	return done.m.status;
}

static int raw_copy(int chan, uint32_t id, uint64_t dbuf_id, uint64_t off, uint64_t size,
		    uint32_t dir, char *text, size_t cap)
{
	uint8_t buf[256];
	struct ipc_copy c = {
		.dbuf_id = dbuf_id, .dbuf_offset = off, .seg_id = 1, .size = size, .dir = dir
	};
	int n = ipc_encode_copy(buf, sizeof(buf), id, &c);

	return test_raw_call(chan, buf, (size_t)n, text, cap);
}

/* Only the client's own module, by name, within the variable's size, never read-only memory. */
static void test_symbols_raw_client_bounded(void **state)
{
	struct env *e = *state;
	static uint8_t buf[IPC_MSG_MAX];
	struct ipc_mod_load ml = { .mod_id = 7,
				   .lang = GPUX_LANG_HOST,
				   .code_len = sizeof(host_src) - 1 };
	struct ipc_global_info gi;
	struct ipc_kernel_attrs ka;
	char text[256];
	int sup, chan, fd, n;

	if (!e->host)
		skip();
	chan = test_raw_channel(&e->d, &sup);
	assert_int_equal(ipc_segment_create("seg", 4096, &fd), 0);
	test_send_seg(chan, 1, 4096, 0, fd);
	(void)close(fd);
	/* Loaded without waiting: the first question waits for the build. */
	n = ipc_encode_mod_load(buf, sizeof(buf), 0, &ml, "", host_src);
	assert_int_equal(ipc_channel_send(chan, buf, (size_t)n, NULL, 0, 0), 0);
	assert_int_equal(raw_ask(chan, IPC_KERNEL_ATTRS_REQ, 1, 7, 0, "apply", &ka, sizeof(ka)),
			 GPUX_OK);
	assert_int_equal(ka.nparams, 1);

	/* A module it does not hold (another client's has another id space). */
	assert_int_equal(raw_ask(chan, IPC_GLOBAL_REQ, 2, 8, 20, "coeffs", &gi, sizeof(gi)),
			 GPUX_E_INVAL);
	assert_int_equal(raw_ask(chan, IPC_GLOBAL_REQ, 3, 7, 20, "coeffs", &gi, sizeof(gi)),
			 GPUX_OK);
	assert_int_equal(gi.size, 16);
	assert_int_equal(gi.flags, 0);
	/* Its id is taken now. */
	assert_int_equal(raw_ask(chan, IPC_GLOBAL_REQ, 4, 7, 20, "counter", &gi, sizeof(gi)),
			 GPUX_E_INVAL);
	/* Within its 16 bytes only, as any device buffer. */
	assert_int_equal(raw_copy(chan, 5, 20, 0, 16, IPC_COPY_TO_DBUF, text, sizeof(text)),
			 GPUX_OK);
	assert_int_equal(raw_copy(chan, 6, 20, 8, 16, IPC_COPY_TO_DBUF, text, sizeof(text)),
			 GPUX_E_INVAL);
	assert_non_null(strstr(text, "outside"));
	assert_int_equal(raw_copy(chan, 7, 20, 16, 1, IPC_COPY_FROM_DBUF, text, sizeof(text)),
			 GPUX_E_INVAL);
	/* Read-only memory: read, never written, whatever the client's library says. */
	assert_int_equal(raw_ask(chan, IPC_GLOBAL_REQ, 8, 7, 21, "limit", &gi, sizeof(gi)),
			 GPUX_OK);
	assert_int_equal(gi.flags, IPC_GLOBAL_READ_ONLY);
	assert_int_equal(raw_copy(chan, 9, 21, 0, 4, IPC_COPY_FROM_DBUF, text, sizeof(text)),
			 GPUX_OK);
	assert_int_equal(raw_copy(chan, 10, 21, 0, 4, IPC_COPY_TO_DBUF, text, sizeof(text)),
			 GPUX_E_INVAL);
	assert_non_null(strstr(text, "read-only"));
	/* Nothing but the module's own exported variables. */
	assert_int_equal(raw_ask(chan, IPC_GLOBAL_REQ, 11, 7, 22, "environ", &gi, sizeof(gi)),
			 GPUX_E_NOTFOUND);
	assert_int_equal(
		raw_ask(chan, IPC_GLOBAL_REQ, 12, 7, 22, "gpux_params_apply", &gi, sizeof(gi)),
		GPUX_E_NOTFOUND);
	assert_int_equal(raw_ask(chan, IPC_GLOBAL_REQ, 13, 7, 22, "hidden", &gi, sizeof(gi)),
			 GPUX_E_NOTFOUND);
	/* A name without its NUL does not decode: answered, the channel kept. */
	{
		struct ipc_sym_req q = { .mod_id = 7, .dbuf_id = 23, .name_len = 3 };

		memcpy(q.name, "coeffs", 7);
		n = ipc_encode(buf, sizeof(buf), IPC_GLOBAL_REQ, 14, 0, &q, sizeof(q), NULL, 0);
		assert_int_equal(test_raw_call(chan, buf, (size_t)n, text, sizeof(text)),
				 GPUX_E_INVAL);
	}
	assert_int_equal(raw_ask(chan, IPC_GLOBAL_REQ, 15, 7, 23, "counter", &gi, sizeof(gi)),
			 GPUX_OK);
	assert_int_equal(gi.size, 8);
	(void)close(chan);
	(void)close(sup);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_symbols_cuda_kernel_attrs),
		cmocka_unit_test(test_symbols_cuda_globals),
		cmocka_unit_test(test_symbols_host_c),
		cmocka_unit_test(test_symbols_wait_for_the_build),
		cmocka_unit_test(test_symbols_raw_client_bounded),
	};

	if (strcmp(TEST_BACKEND, "cuda") == 0) {
		if (getenv("GPUX_CUDA_LIB") ? !test_have_nvrtc() : test_gpu_count() == 0) {
			printf("SKIP: %s\n", getenv("GPUX_CUDA_LIB") ? "no NVRTC" : "no GPU");
			return 77;
		}
	}
	return cmocka_run_group_tests_name("e2e-symbols-" TEST_BACKEND, tests, setup, teardown);
}
