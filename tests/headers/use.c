/* SPDX-License-Identifier: MIT */
/* tests/headers/use.c: a program's use of the public headers, compiled as C and as C++ under
 * every standard by test-headers.sh (never linked): the inline helpers and macros expand. */
#include <gpux/gpux.h>
#include <gpux/host-kernel.h>
#include <gpux/version.h>

#if !GPUX_CHECK_VERSION(0, 1)
#error "GPUX_CHECK_VERSION(0, 1) is false"
#endif

int gpux_headers_use(gpux_ctx *ctx, gpux_module *m, gpux_buf *b, gpux_dbuf *d);

int gpux_headers_use(gpux_ctx *ctx, gpux_module *m, gpux_buf *b, gpux_dbuf *d)
{
	uint64_t n = 64;
	float a = 2.0f;
	struct gpux_arg args[8];
	struct gpux_launch l = {
		{ 1, 1, 1 }, { 64, 1, 1 }, 0, 0, GPUX_ANY, GPUX_LAUNCH_TIMED, NULL
	};
	struct gpux_device_info info;
	struct gpux_times t;
	gpux_req *r = NULL;
	gpux_status s;

	args[0] = GPUX_ARG_VALUE(n);
	args[1] = GPUX_ARG_VALUE(a);
	args[2] = gpux_arg_in(b, 0, n * sizeof(float));
	args[3] = gpux_arg_out(b, 0, n * sizeof(float));
	args[4] = gpux_arg_inout(b, 0, n * sizeof(float));
	args[5] = gpux_arg_mapped(b, 0, n * sizeof(float));
	args[6] = gpux_arg_cached(b, 0, n * sizeof(float));
	args[7] = gpux_arg_dbuf(d, 0, gpux_dbuf_size(d));
	if (args[7].dbuf != d || args[2].buf != b || args[0].value != &n)
		return 1;
	s = gpux_device_info(ctx, 0, &info);
	if (s != GPUX_OK)
		return (int)s;
	s = gpux_submit(m, "saxpy", &l, args, 8, &r);
	if (s == GPUX_OK)
		s = gpux_wait(r, -1);
	if (s == GPUX_OK)
		s = gpux_req_times(r, &t);
	gpux_req_free(r);
	return s == GPUX_OK ? 0 : (int)gpux_strerror(s)[0];
}
