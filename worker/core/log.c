/* SPDX-License-Identifier: MIT */
/* worker/core/log.c: the worker's log lines (on stderr), and formatted strings for its messages. */
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>

#include "macro.h"
#include "ratelimit.h"
#include "wrk.h"

/*
 * Lines a client can cause (its refusal, a module cache write its compile fails): 10 a
 * second for each user. A client that is dropped comes back as a new one, its user does not,
 * so the user is what is counted.
 */
#define CLIENT_LINES 10u

static pthread_mutex_t client_lock = PTHREAD_MUTEX_INITIALIZER;
static struct wrk_ratelimit client_lines = WRK_RATELIMIT_INIT(NSEC_PER_SEC, CLIENT_LINES);

static __attribute__((format(printf, 2, 0))) void vlog(struct wrk *w, const char *fmt, va_list ap)
{
	if (w)
		(void)fprintf(stderr, "gpux-worker[%u]: ", w->opts.device);
	else
		(void)fputs("gpux-worker: ", stderr);
	(void)vfprintf(stderr, fmt, ap);
	(void)fputc('\n', stderr);
}

void wrk_log(struct wrk *w, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vlog(w, fmt, ap);
	va_end(ap);
}

void wrk_log_client(struct wrk *w, uint32_t uid, const char *fmt, ...)
{
	va_list ap;
	int64_t missed;

	/* Any thread (the compile thread's lines too). */
	(void)pthread_mutex_lock(&client_lock);
	missed = wrk_ratelimit_take(&client_lines, uid, mono_ns());
	(void)pthread_mutex_unlock(&client_lock);
	if (missed < 0)
		return;
	if (missed > 0)
		wrk_log(w,
			"... and %lld more lines about clients, left out (of uid %u and others "
			"sharing its limit)",
			(long long)missed, uid);
	va_start(ap, fmt);
	vlog(w, fmt, ap);
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
