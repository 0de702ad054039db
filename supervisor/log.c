/* SPDX-License-Identifier: MIT */
/* supervisor/log.c: gpuxd's log lines, on stderr. */
#include <stdarg.h>
#include <stdio.h>

#include "sup.h"

void sup_log(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	(void)fprintf(stderr, "gpuxd: ");
	(void)vfprintf(stderr, fmt, ap);
	(void)fputc('\n', stderr);
	va_end(ap);
}
