/* SPDX-License-Identifier: MIT */
/* ipc/opt.c: command lines from a table: getopt, checked values, the usage text, an argv. */
#include <assert.h>
#include <errno.h>
#include <getopt.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "macro.h"
#include "opt.h"
#include "parse.h"

/* getopt's values: a row is 256 + its index; -h is 'h'. */
#define VAL_ROW 256
#define VAL_VERSION 1
#define USAGE_COLUMN 24

static void why_printf(char *why, size_t why_len, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static void why_printf(char *why, size_t why_len, const char *fmt, ...)
{
	va_list ap;

	if (!why_len)
		return;
	va_start(ap, fmt);
	(void)vsnprintf(why, why_len, fmt, ap);
	va_end(ap);
}

/* Whether s is one of the words of "a|b|c". */
static bool word_in(const char *words, const char *s)
{
	size_t n = strlen(s);

	for (const char *w = words; *w;) {
		size_t len = strcspn(w, "|");

		if (len == n && n && memcmp(w, s, n) == 0)
			return true;
		w += len;
		if (*w == '|')
			w++;
	}
	return false;
}

/* "a|b|c" as "a, b or c". */
static void words_list(const char *words, char *buf, size_t len)
{
	const char *last = strrchr(words, '|');
	size_t used = 0;

	buf[0] = '\0';
	for (const char *w = words; *w && used < len;) {
		size_t n = strcspn(w, "|");
		const char *sep = w == words ? "" : w == last + 1 ? " or " : ", ";
		int k = snprintf(buf + used, len - used, "%s%.*s", sep, (int)n, w);

		if (k < 0)
			break;
		used += (size_t)k;
		w += n;
		if (*w == '|')
			w++;
	}
}

static uint64_t field_get(const struct ipc_opt *o, const void *opts)
{
	const uint8_t *p = (const uint8_t *)opts + o->offset;
	uint32_t u32;
	uint64_t u64;

	if (o->size == sizeof(u32)) {
		memcpy(&u32, p, sizeof(u32));
		return u32;
	}
	memcpy(&u64, p, sizeof(u64));
	return u64;
}

/* v is within the row's range, so it fits a field of 4 bytes when max does. */
static void field_set(const struct ipc_opt *o, void *opts, uint64_t v)
{
	uint8_t *p = (uint8_t *)opts + o->offset;
	uint32_t u32 = (uint32_t)v;

	if (o->size == sizeof(u32))
		memcpy(p, &u32, sizeof(u32));
	else
		memcpy(p, &v, sizeof(v));
}

/* A row as the engine can use it: a field of the right size, a range the field holds. */
static void row_assert(const struct ipc_opt *o, size_t size)
{
	switch (o->kind) {
	case IPC_OPT_SECTION:
	case IPC_OPT_PARSE:
		return;
	case IPC_OPT_FLAG:
		assert(o->size == sizeof(bool));
		break;
	case IPC_OPT_UINT:
	case IPC_OPT_MODE:
		assert(o->size == 4 || o->size == 8);
		assert(o->min <= o->max && (o->size == 8 || o->max <= UINT32_MAX));
		break;
	case IPC_OPT_TEXT:
	case IPC_OPT_WORD:
		assert(o->size == sizeof(const char *));
		assert(o->kind == IPC_OPT_TEXT || o->words);
		break;
	}
	assert(o->offset + o->size <= size);
}

/* Why a number cannot be the row's value, or 0 when it can. */
static int number_check(const struct ipc_opt *o, uint64_t v, char *why, size_t why_len)
{
	bool octal = o->kind == IPC_OPT_MODE;
	unsigned long long bound = v < o->min ? o->min : o->max;

	if (v >= o->min && v <= o->max)
		return 0;
	if (octal)
		why_printf(why, why_len, "--%s: 0%llo is %s than 0%llo", o->name,
			   (unsigned long long)v, v < o->min ? "less" : "more", bound);
	else
		why_printf(why, why_len, "--%s: %llu is %s than %llu", o->name,
			   (unsigned long long)v, v < o->min ? "less" : "more", bound);
	return -EINVAL;
}

/* Take the value of row o into opts. */
static int take(const struct ipc_opt *o, const char *value, void *opts, char *why, size_t why_len)
{
	char buf[256];
	uint64_t v;
	int r;

	switch (o->kind) {
	case IPC_OPT_SECTION:
		break;
	case IPC_OPT_FLAG:
		*(bool *)((uint8_t *)opts + o->offset) = true;
		return 0;
	case IPC_OPT_UINT:
	case IPC_OPT_MODE:
		if (ipc_parse_u64(value, o->kind == IPC_OPT_MODE ? 8 : 10, &v) < 0) {
			why_printf(why, why_len, "--%s: \"%s\" is not %s", o->name, value,
				   o->kind == IPC_OPT_MODE ? "an octal mode" : "a number");
			return -EINVAL;
		}
		r = number_check(o, v, why, why_len);
		if (r < 0)
			return r;
		field_set(o, opts, v);
		return 0;
	case IPC_OPT_WORD:
		if (!word_in(o->words, value)) {
			words_list(o->words, buf, sizeof(buf));
			why_printf(why, why_len, "--%s: \"%s\" is not %s", o->name, value, buf);
			return -EINVAL;
		}
		memcpy((uint8_t *)opts + o->offset, &value, sizeof(value));
		return 0;
	case IPC_OPT_TEXT:
		if (!*value) {
			why_printf(why, why_len, "--%s: an empty value", o->name);
			return -EINVAL;
		}
		memcpy((uint8_t *)opts + o->offset, &value, sizeof(value));
		return 0;
	case IPC_OPT_PARSE:
		buf[0] = '\0';
		r = o->parse(value, opts, buf, sizeof(buf));
		if (r < 0)
			why_printf(why, why_len, "--%s: %s", o->name, buf[0] ? buf : strerror(-r));
		return r;
	}
	return -EINVAL;
}

int ipc_opt_parse(const struct ipc_opt_prog *prog, int argc, char **argv, void *opts, char *why,
		  size_t why_len)
{
	_cleanup_(freep) struct option *longopts = calloc(prog->nopts + 3, sizeof(*longopts));
	_cleanup_(freep) void *copy = malloc(prog->size);
	size_t n = 0;
	int c, r;

	if (!longopts || !copy)
		return -ENOMEM;
	memcpy(copy, opts, prog->size);
	for (size_t i = 0; i < prog->nopts; i++) {
		const struct ipc_opt *o = &prog->opts[i];

		row_assert(o, prog->size);
		if (o->kind == IPC_OPT_SECTION)
			continue;
		longopts[n++] =
			(struct option){ o->name,
					 o->kind == IPC_OPT_FLAG ? no_argument : required_argument,
					 NULL, VAL_ROW + (int)i };
	}
	longopts[n++] = (struct option){ "help", no_argument, NULL, 'h' };
	if (prog->version)
		longopts[n++] = (struct option){ "version", no_argument, NULL, VAL_VERSION };

	/* From the start (0 makes glibc's getopt forget an earlier command line), quietly. */
	optind = 0;
	opterr = 0;
	while ((c = getopt_long(argc, argv, ":h", longopts, NULL)) >= 0) {
		const char *given = argv[optind - 1];

		if (c == 'h')
			return IPC_OPT_HELP;
		if (c == VAL_VERSION)
			return IPC_OPT_VERSION;
		if (c == ':') {
			why_printf(why, why_len, "%s needs a value", given);
			return -EINVAL;
		}
		if (c == '?') {
			if (optopt >= VAL_ROW || strchr(given, '='))
				why_printf(why, why_len, "%.*s takes no value",
					   (int)strcspn(given, "="), given);
			else
				why_printf(why, why_len, "unknown option %s", given);
			return -EINVAL;
		}
		r = take(&prog->opts[c - VAL_ROW], optarg, copy, why, why_len);
		if (r < 0)
			return r;
	}
	if (optind < argc) {
		why_printf(why, why_len, "unexpected argument \"%s\"", argv[optind]);
		return -EINVAL;
	}
	memcpy(opts, copy, prog->size);
	return 0;
}

/* One option's lines: its name and value, then its help from USAGE_COLUMN on. */
static void usage_row(FILE *f, const char *left, const char *help)
{
	int n = fprintf(f, "%s", left);

	for (const char *h = help; *h;) {
		size_t len = strcspn(h, "\n");

		if (n >= USAGE_COLUMN)
			(void)fputs("  ", f);
		else
			(void)fprintf(f, "%*s", USAGE_COLUMN - n, "");
		(void)fprintf(f, "%.*s\n", (int)len, h);
		n = 0;
		h += len;
		if (*h == '\n')
			h++;
	}
}

void ipc_opt_usage(const struct ipc_opt_prog *prog, FILE *f)
{
	char left[128], version[64];

	(void)fprintf(f, "usage: %s\n", prog->synopsis);
	for (size_t i = 0; i < prog->nopts; i++) {
		const struct ipc_opt *o = &prog->opts[i];

		if (o->kind == IPC_OPT_SECTION) {
			(void)fprintf(f, "%s\n", o->help);
			continue;
		}
		(void)snprintf(left, sizeof(left), "  --%s%s%s", o->name, o->arg ? " " : "",
			       o->arg ? o->arg : "");
		usage_row(f, left, o->help);
	}
	usage_row(f, "  -h, --help", "this text");
	if (prog->version) {
		(void)snprintf(version, sizeof(version), "%s's version", prog->name);
		usage_row(f, "  --version", version);
	}
}

void ipc_argv_init(struct ipc_argv *a, char **v, size_t cap, char *text, size_t text_cap)
{
	assert(cap > 0);
	*a = (struct ipc_argv){ .v = v, .cap = cap, .text = text, .text_cap = text_cap };
	v[0] = NULL;
}

int ipc_argv_add(struct ipc_argv *a, const char *s)
{
	/* One place is always left for the NULL at the end. */
	if (a->n + 1 >= a->cap)
		return -E2BIG;
	a->v[a->n++] = (char *)s;
	a->v[a->n] = NULL;
	return 0;
}

/* Write a string into the argv's text and append it. */
static int argv_addf(struct ipc_argv *a, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

static int argv_addf(struct ipc_argv *a, const char *fmt, ...)
{
	size_t left = a->text_cap - a->text_used;
	char *s = a->text + a->text_used;
	va_list ap;
	int n;

	if (a->n + 1 >= a->cap)
		return -E2BIG;
	va_start(ap, fmt);
	n = vsnprintf(s, left, fmt, ap);
	va_end(ap);
	if (n < 0 || (size_t)n >= left)
		return -E2BIG;
	a->text_used += (size_t)n + 1;
	return ipc_argv_add(a, s);
}

static bool same_text(const char *a, const char *b)
{
	return a == b || (a && b && strcmp(a, b) == 0);
}

int ipc_opt_argv(const struct ipc_opt_prog *prog, const void *opts, const void *defaults,
		 struct ipc_argv *a)
{
	for (size_t i = 0; i < prog->nopts; i++) {
		const struct ipc_opt *o = &prog->opts[i];
		const uint8_t *p = (const uint8_t *)opts + o->offset;
		const char *s = NULL;
		uint64_t v = 0;
		int r;

		row_assert(o, prog->size);
		switch (o->kind) {
		case IPC_OPT_SECTION:
			continue;
		case IPC_OPT_PARSE:
			/* What a parser made cannot be written back. */
			return -EINVAL;
		case IPC_OPT_FLAG:
			if (!*(const bool *)p)
				continue;
			r = argv_addf(a, "--%s", o->name);
			if (r < 0)
				return r;
			continue;
		case IPC_OPT_UINT:
		case IPC_OPT_MODE:
			v = field_get(o, opts);
			if (v == field_get(o, defaults))
				continue;
			if (number_check(o, v, NULL, 0) < 0)
				return -EINVAL;
			r = argv_addf(a, "--%s", o->name);
			if (r == 0 && o->kind == IPC_OPT_MODE)
				r = argv_addf(a, "0%llo", (unsigned long long)v);
			else if (r == 0)
				r = argv_addf(a, "%llu", (unsigned long long)v);
			if (r < 0)
				return r;
			continue;
		case IPC_OPT_TEXT:
		case IPC_OPT_WORD:
			memcpy(&s, p, sizeof(s));
			if (!s || same_text(s, *(const char *const *)((const uint8_t *)defaults +
								      o->offset)))
				continue;
			if (!*s || (o->kind == IPC_OPT_WORD && !word_in(o->words, s)))
				return -EINVAL;
			r = argv_addf(a, "--%s", o->name);
			if (r == 0)
				r = ipc_argv_add(a, s);
			if (r < 0)
				return r;
			continue;
		}
	}
	return 0;
}

/* ---- bash completion ---- */

/* "a|b|c" as "a b c". */
static void put_words(FILE *f, const char *words)
{
	for (const char *w = words; *w; w++)
		(void)fputc(*w == '|' ? ' ' : *w, f);
}

int ipc_opt_bash(const struct ipc_opt_prog *prog, FILE *f)
{
	char fn[64];
	size_t n = 0;

	for (const char *p = prog->name; *p && n + 1 < sizeof(fn); p++)
		fn[n++] = *p == '-' ? '_' : *p;
	fn[n] = '\0';
	(void)fprintf(f,
		      "# bash completion of %s, made from its table of options (ipc_opt_bash)\n"
		      "_%s()\n{\n\tlocal cur=${COMP_WORDS[COMP_CWORD]} "
		      "prev=${COMP_WORDS[COMP_CWORD-1]}\n\n\tcase $prev in\n",
		      prog->name, fn);
	for (size_t i = 0; i < prog->nopts; i++) {
		const struct ipc_opt *o = &prog->opts[i];
		const char *arg = o->arg ? o->arg : "";

		if (o->kind == IPC_OPT_SECTION || o->kind == IPC_OPT_FLAG)
			continue;
		(void)fprintf(f, "\t--%s)\n\t\t", o->name);
		if (o->words) {
			(void)fputs("COMPREPLY=($(compgen -W '", f);
			put_words(f, o->words);
			(void)fputs("' -- \"$cur\"))", f);
		} else if (strcmp(arg, "PATH") == 0 || strcmp(arg, "FILE") == 0) {
			(void)fputs("compopt -o filenames; COMPREPLY=($(compgen -f -- \"$cur\"))",
				    f);
		} else if (strcmp(arg, "DIR") == 0) {
			(void)fputs("compopt -o filenames; COMPREPLY=($(compgen -d -- \"$cur\"))",
				    f);
		} else if (strcmp(arg, "GROUP") == 0) {
			(void)fputs("COMPREPLY=($(compgen -g -- \"$cur\"))", f);
		} else {
			(void)fputs("COMPREPLY=()", f);
		}
		(void)fputs("\n\t\treturn;;\n", f);
	}
	(void)fprintf(f, "\tesac\n\tCOMPREPLY=($(compgen -W '");
	for (size_t i = 0; i < prog->nopts; i++)
		if (prog->opts[i].kind != IPC_OPT_SECTION)
			(void)fprintf(f, "--%s ", prog->opts[i].name);
	(void)fprintf(f, "--help%s' -- \"$cur\"))\n}\ncomplete -F _%s %s\n",
		      prog->version ? " --version" : "", fn, prog->name);
	return ferror(f) ? -EIO : 0;
}
