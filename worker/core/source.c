/* SPDX-License-Identifier: MIT */
/* worker/core/source.c: C and C++ source in a canonical form: what a compiler reads the same, whatever its comments and spacing. */
#include <errno.h>
#include <stdbool.h>
#include <string.h>

#include "wrk.h"

/*
 * Two sources whose canonical forms are equal are read the same by a compiler: the same
 * tokens, with whitespace between the same ones (a comment is whitespace; whether there is
 * any matters to macros, `#define F(x)` against `#define F (x)`, and to `#`, not how much),
 * on the same lines (__LINE__, assert(), a compile log's line numbers), in the same
 * directives. So a module that differs from a cached one only in comments or spacing within
 * its lines loads from the cache (worker/core/module.c keys modules by this form), and none
 * that could compile to something else does.
 *
 * The form: tokens as written (string and character literals, header names, numbers whole);
 * within a line, a run of whitespace and comments as one space, none at its start and end;
 * each newline as it is, and each newline inside a comment as MARK (a comment may carry a
 * directive on to the next line: that is not a newline); line splices as written; blank
 * lines at the end dropped. Whatever this reading does not follow exactly is refused
 * (-EINVAL), and the module is keyed by its bytes: raw strings, trigraphs, the digraph `%:`,
 * a splice in or next to a comment or after blanks, literals left open, __has_include.
 */

#define MARK '\x01'

struct canon {
	const char *s;
	size_t len, i;
	char *out;
	size_t o;
	bool pending;    /* whitespace since the last token */
	bool line_start; /* no token yet on this (logical) line */
	int directive;   /* 1: the line's first token was '#'; 2: then include or import */
};

static bool ident_start(unsigned char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == '$' ||
	       c >= 0x80;
}

static bool ident_char(unsigned char c)
{
	return ident_start(c) || (c >= '0' && c <= '9');
}

static bool blank(char c)
{
	return c == ' ' || c == '\t' || c == '\v' || c == '\f' || c == '\r';
}

static char at(const struct canon *c, size_t i)
{
	return i < c->len ? c->s[i] : '\0';
}

/* Whether a backslash at i ends its line, perhaps after blanks (how many bytes, newline
 * included, in *ret_n). */
static bool splice_at(const struct canon *c, size_t i, size_t *ret_n)
{
	size_t j = i + 1;

	while (j < c->len && blank(c->s[j]) && c->s[j] != '\r')
		j++;
	if (at(c, j) == '\r' && at(c, j + 1) == '\n')
		j++;
	if (at(c, j) != '\n')
		return false;
	*ret_n = j + 1 - i;
	return true;
}

/* Before a token: the pending whitespace as one space, unless the line has no token yet. */
static void token_begins(struct canon *c)
{
	if (c->pending && !c->line_start)
		c->out[c->o++] = ' ';
	c->pending = false;
	c->line_start = false;
}

static void copy(struct canon *c, size_t n)
{
	memcpy(c->out + c->o, c->s + c->i, n);
	c->o += n;
	c->i += n;
}

/* A comment at i ("//" or "/ *"): each newline in it as MARK; whitespace after. */
static int comment(struct canon *c)
{
	bool block = c->s[c->i + 1] == '*';
	size_t n;

	c->i += 2;
	for (;;) {
		char ch = at(c, c->i);

		if (c->i >= c->len)
			return block ? -EINVAL : 0;
		/* A splice would carry a line comment on, or join a block comment's end. */
		if (ch == '\\' && splice_at(c, c->i, &n))
			return -EINVAL;
		if (!block && ch == '\n')
			break;
		if (block && ch == '*' && at(c, c->i + 1) == '/') {
			c->i += 2;
			break;
		}
		if (ch == '\n')
			c->out[c->o++] = MARK;
		c->i++;
	}
	c->pending = true;
	return 0;
}

/* A string or character literal at i, as written: -EINVAL when a line ends it first. */
static int literal(struct canon *c)
{
	char q = c->s[c->i];
	size_t j = c->i + 1;

	while (j < c->len && c->s[j] != q) {
		if (c->s[j] == '\n')
			return -EINVAL;
		j += c->s[j] == '\\' ? 2 : 1;
	}
	if (j >= c->len)
		return -EINVAL;
	token_begins(c);
	copy(c, j + 1 - c->i);
	return 0;
}

/* A preprocessing number at i: digits, letters, '.', signs after an exponent, and the
 * digit separator ' before a digit or letter. */
static void number(struct canon *c)
{
	size_t j = c->i;

	for (;;) {
		char ch = at(c, j), next = at(c, j + 1);

		if (ident_char((unsigned char)ch) || ch == '.') {
			j += ((ch | 0x20) == 'e' || (ch | 0x20) == 'p') &&
					     (next == '+' || next == '-')
				     ? 2
				     : 1;
		} else if (ch == '\'' && ident_char((unsigned char)next)) {
			j += 2;
		} else {
			break;
		}
	}
	token_begins(c);
	copy(c, j - c->i);
}

static bool word_is(const char *s, size_t n, const char *w)
{
	return n == strlen(w) && memcmp(s, w, n) == 0;
}

/* An identifier at i; raw strings and __has_include refused. */
static int identifier(struct canon *c)
{
	const char *s = c->s + c->i;
	size_t n = 0;

	while (c->i + n < c->len && ident_char((unsigned char)s[n]))
		n++;
	if (at(c, c->i + n) == '"' &&
	    (word_is(s, n, "R") || word_is(s, n, "u8R") || word_is(s, n, "uR") ||
	     word_is(s, n, "UR") || word_is(s, n, "LR")))
		return -EINVAL;
	if (word_is(s, n, "__has_include") || word_is(s, n, "__has_include_next"))
		return -EINVAL;
	token_begins(c);
	c->directive =
		c->directive == 1 && (word_is(s, n, "include") || word_is(s, n, "include_next") ||
				      word_is(s, n, "import"))
			? 2
			: 0;
	copy(c, n);
	return 0;
}

/* A header name <...> after #include, as written. */
static int header_name(struct canon *c)
{
	size_t j = c->i + 1;

	while (j < c->len && c->s[j] != '>' && c->s[j] != '\n')
		j++;
	if (at(c, j) != '>')
		return -EINVAL;
	token_begins(c);
	c->directive = 0;
	copy(c, j + 1 - c->i);
	return 0;
}

static bool has_trigraph(const char *s, size_t len)
{
	for (const char *p = s; (p = memchr(p, '?', len - (size_t)(p - s))) && p + 2 < s + len; p++)
		if (p[1] == '?' && strchr("=/'()!<>-", p[2]) && p[2])
			return true;
	return false;
}

/* One step at i (whatever starts there). */
static int step(struct canon *c)
{
	char ch = c->s[c->i], next = at(c, c->i + 1);
	size_t n;

	if (ch == '\n') {
		c->out[c->o++] = '\n';
		c->i++;
		c->pending = false;
		c->line_start = true;
		c->directive = 0;
		return 0;
	}
	if (blank(ch)) {
		c->pending = true;
		c->i++;
		return 0;
	}
	if (ch == '\\' && splice_at(c, c->i, &n)) {
		/* Blanks before the newline, or a comment's slash or star beside it, would be
		 * read otherwise than here. */
		if (n != 2 || (c->i > 0 && (c->s[c->i - 1] == '/' || c->s[c->i - 1] == '*')) ||
		    at(c, c->i + 2) == '/' || at(c, c->i + 2) == '*')
			return -EINVAL;
		if (c->pending && !c->line_start)
			c->out[c->o++] = ' ';
		c->pending = false;
		copy(c, 2);
		return 0;
	}
	if (ch == '/' && (next == '/' || next == '*'))
		return comment(c);
	if (ch == '"' || ch == '\'')
		return literal(c);
	if (ident_start((unsigned char)ch))
		return identifier(c);
	if ((ch >= '0' && ch <= '9') || (ch == '.' && next >= '0' && next <= '9')) {
		number(c);
		c->directive = 0;
		return 0;
	}
	if (ch == '<' && c->directive == 2)
		return header_name(c);
	if (ch == '%' && next == ':')
		return -EINVAL;
	c->directive = ch == '#' && c->line_start ? 1 : 0;
	token_begins(c);
	copy(c, 1);
	return 0;
}

ssize_t wrk_source_canon(const char *src, size_t len, char *out)
{
	struct canon c = { .s = src, .len = len, .out = out, .line_start = true };

	if (has_trigraph(src, len))
		return -EINVAL;
	while (c.i < c.len) {
		int r = step(&c);

		if (r < 0)
			return r;
	}
	while (c.o > 0 && (out[c.o - 1] == '\n' || out[c.o - 1] == MARK))
		c.o--;
	return (ssize_t)c.o;
}
