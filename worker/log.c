/* SPDX-License-Identifier: MIT */
/* worker/log.c: the worker's log lines (on stderr), and formatted strings for its messages. */
#include <stdarg.h>
#include <stdio.h>

#include "wrk.h"

void wrk_log(struct wrk *w, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	if (w)
		(void)fprintf(stderr, "gpux-worker[%u]: ", w->opts.device);
	else
		(void)fputs("gpux-worker: ", stderr);
	(void)vfprintf(stderr, fmt, ap);
	(void)fputc('\n', stderr);
	va_end(ap);
}

char *wrk_strdup_printf(const char *fmt, ...)
{
	va_list ap;
	char *s;
	int n;

	va_start(ap, fmt);
	n = vasprintf(&s, fmt, ap);
	va_end(ap);
	return n < 0 ? NULL : s;
}
