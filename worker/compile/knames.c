/* SPDX-License-Identifier: MIT */
/* worker/compile/knames.c: a module's kernel names: name expressions, C++ names, mangled symbols. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <gpux/gpux.h>

#include "cubin.h"
#include "knames.h"
#include "macro.h"
#include "wrk.h"

#define ENTRIES_MAX 65536u
#define NAME_MAX_LEN 1024u
#define LISTED_MAX 8u /* kernels named in a "not found" message */

struct wrk_knames {
	char **entries; /* the kernels' symbols */
	unsigned nentries;
	bool entries_known;
	char *pairs; /* nnames (expression, symbol) pairs of strings */
	const char **exprs, **syms;
	unsigned nnames;
	size_t bytes;     /* what all this holds */
	size_t max_bytes; /* what it may */
};

/* Count n more bytes held: -E2BIG past the most it may hold. */
static int bytes_add(struct wrk_knames *k, size_t n)
{
	if (n > k->max_bytes - k->bytes)
		return -E2BIG;
	k->bytes += n;
	return 0;
}

static int entry_add(const char *name, void *userdata)
{
	struct wrk_knames *k = userdata;
	size_t len = strlen(name) + 1;
	char **e;
	int r;

	if (k->nentries == ENTRIES_MAX)
		return 0;
	/* Symbols may all name one long string: the copies are what is counted. */
	r = bytes_add(k, len + sizeof(*e));
	if (r < 0)
		return r;
	if ((k->nentries & (k->nentries - 1)) == 0) {
		e = realloc(k->entries, MAX(2u * k->nentries, 16u) * sizeof(*e));
		if (!e)
			return -ENOMEM;
		k->entries = e;
	}
	k->entries[k->nentries] = malloc(len);
	if (!k->entries[k->nentries])
		return -ENOMEM;
	memcpy(k->entries[k->nentries], name, len);
	k->nentries++;
	return 0;
}

void wrk_knames_free(struct wrk_knames *k)
{
	if (!k)
		return;
	for (unsigned i = 0; i < k->nentries; i++)
		free(k->entries[i]);
	free(k->entries);
	free(k->pairs);
	free(k->exprs);
	free(k->syms);
	free(k);
}

/* The name expressions' pairs (nnames pairs of strings, names_len bytes), copied into k. */
static int pairs_add(struct wrk_knames *k, const char *names, size_t names_len, uint32_t nnames)
{
	const char *s;
	int r;

	if (!nnames)
		return 0;
	r = bytes_add(k, names_len + 2 * (size_t)nnames * sizeof(*k->exprs));
	if (r < 0)
		return r;
	k->pairs = malloc(names_len);
	k->exprs = calloc(nnames, sizeof(*k->exprs));
	k->syms = calloc(nnames, sizeof(*k->syms));
	if (!k->pairs || !k->exprs || !k->syms)
		return -ENOMEM;
	memcpy(k->pairs, names, names_len);
	s = k->pairs;
	for (unsigned i = 0; i < nnames; i++) {
		k->exprs[i] = s;
		s += strlen(s) + 1;
		k->syms[i] = s;
		s += strlen(s) + 1;
	}
	k->nnames = nnames;
	return 0;
}

int wrk_knames_new(const struct wrk_cuimage *img, size_t max_bytes, struct wrk_knames **ret)
{
	struct wrk_knames *k = calloc(1, sizeof(*k));
	int r;

	if (!k)
		return -ENOMEM;
	k->max_bytes = max_bytes;
	r = wrk_code_entries(img->code, img->code_len, entry_add, k);
	if (r == -ENOMEM || r == -E2BIG) {
		wrk_knames_free(k);
		return r;
	}
	k->entries_known = r == 0;
	r = pairs_add(k, img->names, img->names_len, img->nnames);
	if (r < 0) {
		wrk_knames_free(k);
		return r;
	}
	*ret = k;
	return 0;
}

int wrk_knames_new_list(const char *const *syms, unsigned nsyms, const char *pairs,
			size_t pairs_len, uint32_t npairs, size_t max_bytes,
			struct wrk_knames **ret)
{
	struct wrk_knames *k = calloc(1, sizeof(*k));
	int r = 0;

	if (!k)
		return -ENOMEM;
	k->max_bytes = max_bytes;
	for (unsigned i = 0; i < nsyms && r == 0; i++)
		r = entry_add(syms[i], k);
	if (r == 0)
		r = pairs_add(k, pairs, pairs_len, npairs);
	if (r < 0) {
		wrk_knames_free(k);
		return r;
	}
	k->entries_known = true;
	*ret = k;
	return 0;
}

size_t wrk_knames_bytes(const struct wrk_knames *k)
{
	return k->bytes;
}

/* ---- name expressions ---- */

static bool ident_char(char c)
{
	return c == '_' || c == '$' || (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') ||
	       (c >= 'A' && c <= 'Z');
}

static bool blank(char c)
{
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

/* The next character of s as compared (a run of blanks is one blank between identifier
 * characters, else nothing), or 0 at the end; *i moves past it. Leading blanks are skipped
 * by the caller. */
static char next_char(const char *s, size_t *i)
{
	if (blank(s[*i])) {
		char prev = s[*i - 1];

		while (blank(s[*i]))
			(*i)++;
		if (ident_char(prev) && ident_char(s[*i]))
			return ' ';
	}
	return s[*i] ? s[(*i)++] : 0;
}

bool wrk_knames_same(const char *a, const char *b)
{
	size_t i = 0, j = 0;

	/* Leading blanks never count. */
	while (blank(a[i]))
		i++;
	while (blank(b[j]))
		j++;
	for (;;) {
		char x = next_char(a, &i), y = next_char(b, &j);

		if (x != y)
			return false;
		if (!x)
			return true;
	}
}

const char *wrk_knames_lowered(const struct wrk_knames *k, const char *name)
{
	for (unsigned i = 0; i < k->nnames; i++)
		if (wrk_knames_same(k->exprs[i], name))
			return k->syms[i];
	return NULL;
}

/* ---- C++ names ---- */

/*
 * The Itanium mangling of a function `name` ("f", "ns::f") up to its parameters, into buf:
 * "_Z1f" or "_ZN2ns1f"; into sbuf, with internal linkage: "_ZL1f". 0, or -EINVAL if name is
 * not such a name (the buffers then hold nothing of use).
 */
static int mangle_prefix(const char *name, char *buf, size_t cap, char *sbuf, size_t scap,
			 bool *ret_nested)
{
	char body[NAME_MAX_LEN];
	size_t n = 0, parts = 0;
	const char *p = name;

	if (p[0] == ':' && p[1] == ':')
		p += 2;
	for (;;) {
		size_t len = 0;

		if (!(ident_char(p[0]) && !(p[0] >= '0' && p[0] <= '9')))
			return -EINVAL;
		while (ident_char(p[len]))
			len++;
		n += (size_t)snprintf(body + n, sizeof(body) - MIN(n, sizeof(body)), "%zu%.*s", len,
				      (int)len, p);
		if (n >= sizeof(body))
			return -EINVAL;
		parts++;
		p += len;
		if (!*p)
			break;
		if (p[0] != ':' || p[1] != ':')
			return -EINVAL;
		p += 2;
	}
	if ((size_t)snprintf(buf, cap, "%s%s", parts > 1 ? "_ZN" : "_Z", body) >= cap ||
	    (size_t)snprintf(sbuf, scap, "_ZL%s", body) >= scap)
		return -EINVAL;
	*ret_nested = parts > 1;
	return 0;
}

int wrk_knames_variable(const char *name, char *buf, size_t cap)
{
	char sbuf[NAME_MAX_LEN + 8];
	bool nested;
	size_t n;

	if (mangle_prefix(name, buf, cap, sbuf, sizeof(sbuf), &nested) < 0)
		return -EINVAL;
	/* A variable of the global namespace keeps its name: "::x" is "x". */
	if (!nested) {
		const char *p = name[0] == ':' ? name + 2 : name;

		n = strlen(p);
		if (n + 1 > cap)
			return -EINVAL;
		memcpy(buf, p, n + 1);
		return 0;
	}
	n = strlen(buf);
	if (n + 2 > cap)
		return -EINVAL;
	memcpy(buf + n, "E", 2);
	return 0;
}

/* What follows a symbol's prefix says: 1 this function, 2 an instance of it as a template,
 * 0 something else. */
static int prefix_kind(const char *sym, const char *prefix, bool nested)
{
	size_t n = strlen(prefix);

	if (strncmp(sym, prefix, n) != 0)
		return 0;
	if (sym[n] == 'I')
		return 2;
	if (nested)
		return sym[n] == 'E' ? 1 : 0;
	return sym[n] ? 1 : 0;
}

/* "a, b, c" of up to LISTED_MAX symbols of kind `want` (0: all), to free. */
static char *list(const struct wrk_knames *k, const char *prefix, const char *sprefix, bool nested,
		  int want)
{
	char *s = NULL;
	size_t len = 0;
	unsigned n = 0;
	FILE *f = open_memstream(&s, &len);

	if (!f)
		return NULL;
	for (unsigned i = 0; i < k->nentries; i++) {
		const char *e = k->entries[i];
		int kind =
			want ? MAX(prefix_kind(e, prefix, nested), prefix_kind(e, sprefix, false))
			     : 0;

		if (kind != want)
			continue;
		if (n++ == LISTED_MAX) {
			(void)fputs(", ...", f);
			break;
		}
		(void)fprintf(f, "%s%s", n > 1 ? ", " : "", e);
	}
	(void)fclose(f);
	return s;
}

int wrk_knames_match(const struct wrk_knames *k, const char *name, const char **ret_symbol,
		     char **ret_msg)
{
	char prefix[NAME_MAX_LEN + 8], sprefix[NAME_MAX_LEN + 8];
	const char *found = NULL;
	unsigned funcs = 0, templates = 0;
	bool nested = false;
	char *l;

	if (!k->entries_known) {
		*ret_msg =
			wrk_strdup_printf("no kernel \"%s\" in the module (its kernels cannot be "
					  "listed: ask for one by its exact symbol)",
					  name);
		return -ENOENT;
	}
	if (mangle_prefix(name, prefix, sizeof(prefix), sprefix, sizeof(sprefix), &nested) == 0) {
		for (unsigned i = 0; i < k->nentries; i++) {
			int kind = MAX(prefix_kind(k->entries[i], prefix, nested),
				       prefix_kind(k->entries[i], sprefix, false));

			if (kind == 1 && funcs++ == 0)
				found = k->entries[i];
			templates += kind == 2;
		}
		if (funcs == 1) {
			*ret_symbol = found;
			return 0;
		}
		if (funcs > 1) {
			l = list(k, prefix, sprefix, nested, 1);
			*ret_msg = wrk_strdup_printf(
				"kernel name \"%s\" is ambiguous: it is %u kernels "
				"(%s); ask for one by its symbol",
				name, funcs, l ? l : "");
			free(l);
			return -ENOTUNIQ;
		}
		if (templates) {
			l = list(k, prefix, sprefix, nested, 2);
			*ret_msg = wrk_strdup_printf(
				"no kernel \"%s\": it is a template; ask for an instance by its "
				"name "
				"expression (such as \"%s<float>\"), listed when the module is "
				"loaded or "
				"instantiated in its source, or by its symbol (%s)",
				name, name, l ? l : "");
			free(l);
			return -ENOENT;
		}
	}
	l = list(k, "", "", false, 0);
	*ret_msg = wrk_strdup_printf(
		"no kernel \"%s\" in the module (its kernels: %s)%s", name, l && *l ? l : "none",
		strchr(name, '<') ? "; a template's instance is found by a name "
				    "expression listed when the module is "
				    "loaded, or instantiated in its source"
				  : "");
	free(l);
	return -ENOENT;
}

/* ---- explicit instantiations in a source ---- */

#define DECL_TOKENS_MAX 512u
#define GLOBALS_MAX 4096u

struct tok {
	const char *s;
	size_t n;
	char kind; /* 'i' identifier, 'n' number, 's' string or character, 'p' punctuation */
};

struct lexer {
	const char *p, *end;
	bool line_start;
};

static bool tok_is(const struct tok *t, const char *word)
{
	return t->n == strlen(word) && memcmp(t->s, word, t->n) == 0;
}

static bool tok_punct(const struct tok *t, char c)
{
	return t->kind == 'p' && t->s[0] == c;
}

/* Past a quoted literal starting at p (a quote), escapes included. */
static const char *skip_quoted(const char *p, const char *end)
{
	char q = *p++;

	while (p < end && *p != q && *p != '\n')
		p += *p == '\\' && p + 1 < end ? 2 : 1;
	return p < end ? p + 1 : end;
}

/*
 * Past a raw string R"delim( ... )delim" whose quote is at p. Its '(' is looked for only as
 * far as the longest delimiter (16) allows: a source of many R" without one would otherwise
 * be read to its end at each.
 */
static const char *skip_raw(const char *p, const char *end)
{
	const char *open = memchr(p, '(', MIN((size_t)(end - p), (size_t)18));
	char close[20];
	size_t dn;

	if (!open)
		return skip_quoted(p, end);
	dn = (size_t)(open - p - 1);
	close[0] = ')';
	memcpy(close + 1, p + 1, dn);
	close[dn + 1] = '"';
	p = memmem(open, (size_t)(end - open), close, dn + 2);
	return p ? p + dn + 2 : end;
}

/* Past blanks, comments and preprocessor lines. */
static void skip_space(struct lexer *l)
{
	while (l->p < l->end) {
		char c = *l->p;

		if (c == '\n') {
			l->line_start = true;
			l->p++;
		} else if (blank(c)) {
			l->p++;
		} else if (c == '/' && l->p + 1 < l->end && l->p[1] == '/') {
			while (l->p < l->end && *l->p != '\n')
				l->p++;
		} else if (c == '/' && l->p + 1 < l->end && l->p[1] == '*') {
			const char *e = memmem(l->p + 2, (size_t)(l->end - l->p - 2), "*/", 2);
			l->p = e ? e + 2 : l->end;
		} else if (c == '#' && l->line_start) {
			while (l->p < l->end && *l->p != '\n')
				l->p += *l->p == '\\' && l->p + 1 < l->end ? 2 : 1;
		} else {
			return;
		}
	}
}

static bool lex(struct lexer *l, struct tok *t)
{
	const char *s;

	skip_space(l);
	if (l->p >= l->end)
		return false;
	l->line_start = false;
	s = l->p;
	if (ident_char(*s) && !(*s >= '0' && *s <= '9')) {
		while (l->p < l->end && ident_char(*l->p))
			l->p++;
		t->kind = 'i';
		/* Raw strings: R"(...)", u8R"(...)" and the like. */
		if (l->p < l->end && *l->p == '"' && l->p[-1] == 'R' && l->p - s <= 3) {
			l->p = skip_raw(l->p, l->end);
			t->kind = 's';
		}
	} else if (*s >= '0' && *s <= '9') {
		while (l->p < l->end && (ident_char(*l->p) || *l->p == '.' || *l->p == '\''))
			l->p++;
		t->kind = 'n';
	} else if (*s == '"' || *s == '\'') {
		l->p = skip_quoted(s, l->end);
		t->kind = 's';
	} else {
		l->p++;
		t->kind = 'p';
	}
	t->s = s;
	t->n = (size_t)(l->p - s);
	return true;
}

struct scan {
	struct {
		const char *s;
		size_t n;
	} globals[GLOBALS_MAX];
	unsigned nglobals;
	struct tok decl[DECL_TOKENS_MAX];
};

static bool is_global(const struct scan *sc, const struct tok *t)
{
	for (unsigned i = 0; i < sc->nglobals; i++)
		if (sc->globals[i].n == t->n && memcmp(sc->globals[i].s, t->s, t->n) == 0)
			return true;
	return false;
}

/* After `__global__`: remember the name of the function it declares (the identifier before
 * the first parenthesis that is not an attribute's). */
static void note_global(struct scan *sc, struct lexer *l)
{
	struct tok t, last = { 0 };
	int skip = 0;

	while (lex(l, &t)) {
		if (tok_punct(&t, ';') || tok_punct(&t, '{'))
			return;
		if (skip) {
			skip += tok_punct(&t, '(') - tok_punct(&t, ')');
			continue;
		}
		if (tok_punct(&t, '(')) {
			if (last.kind != 'i')
				return;
			if (tok_is(&last, "__launch_bounds__") || tok_is(&last, "__attribute__") ||
			    tok_is(&last, "__declspec") || tok_is(&last, "alignas") ||
			    tok_is(&last, "decltype") || tok_is(&last, "__align__")) {
				skip = 1;
				continue;
			}
			if (sc->nglobals < GLOBALS_MAX) {
				sc->globals[sc->nglobals].s = last.s;
				sc->globals[sc->nglobals++].n = last.n;
			}
			return;
		}
		last = t;
	}
}

/* In decl[0..n), an instantiation's declarator "name<args>(": the expression, or false. */
static bool declarator(const struct scan *sc, unsigned n, bool global, const char **ret,
		       size_t *ret_len)
{
	const struct tok *d = sc->decl;

	for (unsigned i = 0; i + 1 < n; i++) {
		unsigned j, start = i;
		int angles = 0, parens = 0;

		if (d[i].kind != 'i' || !tok_punct(&d[i + 1], '<'))
			continue;
		for (j = i + 1; j < n; j++) {
			parens += tok_punct(&d[j], '(') - tok_punct(&d[j], ')');
			if (parens == 0)
				angles += tok_punct(&d[j], '<') - tok_punct(&d[j], '>');
			if (angles == 0 && parens == 0)
				break;
		}
		if (j + 1 >= n || !tok_punct(&d[j + 1], '('))
			continue;
		if (!global && !is_global(sc, &d[i]))
			return false;
		/* Qualified: ns::name<...>. */
		while (start >= 3 && tok_punct(&d[start - 1], ':') &&
		       tok_punct(&d[start - 2], ':') && d[start - 3].kind == 'i')
			start -= 3;
		*ret = d[start].s;
		*ret_len = (size_t)(d[j].s + 1 - d[start].s);
		return true;
	}
	return false;
}

int wrk_knames_scan(const char *src, size_t len, wrk_expr_fn *fn, void *userdata)
{
	struct lexer l = { .p = src, .end = src + len, .line_start = true };
	_cleanup_(freep) struct scan *sc = calloc(1, sizeof(*sc));
	struct tok t, prev = { 0 };

	if (!sc)
		return -ENOMEM;
	while (lex(&l, &t)) {
		struct tok next;
		struct lexer at;
		unsigned n = 0;
		bool global = false;
		const char *expr;
		size_t elen;
		int r;

		if (tok_is(&t, "__global__")) {
			note_global(sc, &l);
			prev = t;
			continue;
		}
		at = l;
		/* `template` not followed by `<` (and not after `extern`): an instantiation. */
		if (!tok_is(&t, "template") || tok_is(&prev, "extern") || !lex(&at, &next) ||
		    tok_punct(&next, '<')) {
			prev = t;
			continue;
		}
		sc->decl[n++] = next;
		while (n < DECL_TOKENS_MAX && lex(&at, &next) && !tok_punct(&next, ';') &&
		       !tok_punct(&next, '{'))
			sc->decl[n++] = next;
		for (unsigned i = 0; i < n; i++)
			global |= tok_is(&sc->decl[i], "__global__");
		if (declarator(sc, n, global, &expr, &elen)) {
			r = fn(expr, elen, userdata);
			if (r < 0)
				return r;
		}
		prev = t;
	}
	return 0;
}
