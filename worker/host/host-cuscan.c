/* SPDX-License-Identifier: MIT */
/* worker/host-cuscan.c: what the host back end reads in preprocessed CUDA C++: kernels, arrays. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "host-cuscan.h"
#include "macro.h"
#include "wrk.h"

#define KERNELS_MAX 65536u
#define SHARED_MAX 4096u
#define GLOBALS_MAX 65536u
#define DEPTH_MAX 1024u
#define DECL_TOKENS_MAX 4096u

/* Libraries of the toolkit that the host back end does not have, by a folder in their
 * headers' paths. */
static const struct {
	const char *path, *what;
} libraries[] = {
	{ "/cub/", "CUB" },
	{ "/thrust/", "Thrust" },
	{ "/cuda/", "libcu++ (cuda/...)" },
	{ "/nv/", "libcu++ (nv/...)" },
	{ "/cccl/", "CCCL" },
};

const char *wrk_cuscan_library(const char *path, size_t len)
{
	for (unsigned i = 0; i < ARRAY_SIZE(libraries); i++)
		if (memmem(path, len, libraries[i].path, strlen(libraries[i].path)))
			return libraries[i].what;
	return NULL;
}

struct tok {
	const char *s;
	size_t n;
	char kind;  /* 'i' identifier, 'n' number, 's' string or character, 'p' punctuation */
	bool space; /* blank before it */
	bool user;  /* in a client's file, not a system header */
	unsigned line;
};

struct lexer {
	const char *p, *end;
	bool line_start;
	bool user;
	const char *file; /* the current file's name, as the line marker says it */
	size_t file_len;
	unsigned line;
	const char *library;  /* a system header of an unsupported library, first seen */
	const char *user_dir; /* where the client's files are */
	size_t user_dir_len;
};

enum scope_kind { SCOPE_NS, SCOPE_EXTERN_C, SCOPE_LINK, SCOPE_OTHER };

struct scope {
	enum scope_kind kind;
	const char *name; /* a namespace's, "" anonymous; a::b is one scope */
	size_t name_len;
};

struct scan {
	struct wrk_cuscan *out;
	struct scope stack[DEPTH_MAX];
	unsigned depth, overflow;
	/* The declaration so far: since the last ';', '{' or '}'. */
	bool decl_template, decl_extern, decl_extern_c;
	struct tok prev, prev2;
	struct tok buf[DECL_TOKENS_MAX];
};

static bool ident_start(char c)
{
	return c == '_' || c == '$' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

static bool ident_char(char c)
{
	return ident_start(c) || (c >= '0' && c <= '9');
}

static bool tok_is(const struct tok *t, const char *w)
{
	return t->n == strlen(w) && memcmp(t->s, w, t->n) == 0;
}

static bool tok_punct(const struct tok *t, char c)
{
	return t->kind == 'p' && t->s[0] == c;
}

/* A line marker ("# 12 "file" 1 3"): the file and line that follow, and whether it is a
 * system header; other directives (#pragma) are passed over. p is past the '#'. */
static void directive(struct lexer *l)
{
	const char *p = l->p, *e = memchr(p, '\n', (size_t)(l->end - p));
	char *num_end;
	unsigned long line;

	if (!e)
		e = l->end;
	l->p = e;
	while (p < e && (*p == ' ' || *p == '\t'))
		p++;
	if (p < e && p[0] == 'l' && e - p > 4 && memcmp(p, "line", 4) == 0)
		p += 4;
	line = strtoul(p, &num_end, 10);
	if (num_end == p || num_end > e)
		return;
	p = num_end;
	while (p < e && *p == ' ')
		p++;
	if (p < e && *p == '"') {
		const char *q = ++p;
		bool system = false;

		while (q < e && *q != '"')
			q += *q == '\\' && q + 1 < e ? 2 : 1;
		l->file = p;
		l->file_len = (size_t)(q - p);
		for (const char *f = q; f < e; f++)
			system |= f[0] == ' ' && f + 1 < e && f[1] == '3' &&
				  (f + 2 == e || f[2] == ' ');
		/* The client's by where it is: a system header's macros expanded in a client's
		 * file are marked as of a system header. */
		l->user = l->file_len >= l->user_dir_len &&
			  memcmp(l->file, l->user_dir, l->user_dir_len) == 0;
		if (system && !l->library)
			l->library = wrk_cuscan_library(l->file, l->file_len);
	}
	/* The marker's line is that of the line after it. */
	l->line = (unsigned)line - 1;
}

/* Past a quoted literal starting at p (its quote). */
static const char *skip_quoted(const char *p, const char *end, struct lexer *l)
{
	char q = *p++;

	while (p < end && *p != q && *p != '\n')
		p += *p == '\\' && p + 1 < end ? 2 : 1;
	return p < end && *p == q ? p + 1 : p;
}

/* Past a raw string R"delim( ... )delim" whose quote is at p; its lines are counted. */
static const char *skip_raw(const char *p, const char *end, struct lexer *l)
{
	const char *open = memchr(p, '(', MIN((size_t)(end - p), (size_t)18));
	char close[20];
	size_t dn;
	const char *q;

	if (!open)
		return skip_quoted(p, end, l);
	dn = (size_t)(open - p - 1);
	close[0] = ')';
	memcpy(close + 1, p + 1, dn);
	close[dn + 1] = '"';
	q = memmem(open, (size_t)(end - open), close, dn + 2);
	q = q ? q + dn + 2 : end;
	for (const char *c = p; c < q; c++)
		l->line += *c == '\n';
	return q;
}

static bool lex(struct lexer *l, struct tok *t)
{
	const char *s;
	bool space = false;

	for (;;) {
		if (l->p >= l->end)
			return false;
		if (*l->p == '\n') {
			l->line++;
			l->line_start = true;
			l->p++;
			space = true;
		} else if (*l->p == ' ' || *l->p == '\t' || *l->p == '\r' || *l->p == '\f' ||
			   *l->p == '\v') {
			l->p++;
			space = true;
		} else if (*l->p == '#' && l->line_start) {
			l->p++;
			directive(l);
		} else {
			break;
		}
	}
	l->line_start = false;
	s = l->p;
	if (ident_start(*s)) {
		while (l->p < l->end && ident_char(*l->p))
			l->p++;
		t->kind = 'i';
		/* Raw strings: R"(...)", u8R"(...)" and the like; prefixed literals u8"", L''. */
		if (l->p < l->end && *l->p == '"' && l->p[-1] == 'R' && l->p - s <= 3) {
			l->p = skip_raw(l->p, l->end, l);
			t->kind = 's';
		} else if (l->p < l->end && (*l->p == '"' || *l->p == '\'') && l->p - s <= 2) {
			l->p = skip_quoted(l->p, l->end, l);
			t->kind = 's';
		}
	} else if ((*s >= '0' && *s <= '9') ||
		   (*s == '.' && l->p + 1 < l->end && l->p[1] >= '0' && l->p[1] <= '9')) {
		while (l->p < l->end &&
		       (ident_char(*l->p) || *l->p == '.' || *l->p == '\'' ||
			((*l->p == '+' || *l->p == '-') && strchr("eEpP", l->p[-1]))))
			l->p++;
		t->kind = 'n';
	} else if (*s == '"' || *s == '\'') {
		l->p = skip_quoted(s, l->end, l);
		t->kind = 's';
	} else {
		l->p++;
		t->kind = 'p';
	}
	t->s = s;
	t->n = (size_t)(l->p - s);
	t->space = space;
	t->user = l->user;
	t->line = l->line;
	return true;
}

static int unsupported(struct scan *sc, const struct lexer *l, const struct tok *t,
		       const char *what)
{
	if (sc->out->unsupported)
		return 0;
	sc->out->unsupported = wrk_strdup_printf("%s at %.*s:%u", what, (int)MIN(l->file_len, 255u),
						 l->file ? l->file : "", t->line);
	return sc->out->unsupported ? 0 : -ENOMEM;
}

/* ---- text out of tokens ---- */

static void put_tokens(FILE *f, const struct tok *t, unsigned n)
{
	for (unsigned i = 0; i < n; i++)
		(void)fprintf(f, "%s%.*s", i && t[i].space ? " " : "", (int)t[i].n, t[i].s);
}

/* The enclosing namespaces, "::"-separated, an anonymous one empty. */
static char *scope_path(const struct scan *sc)
{
	char *s = NULL;
	size_t len = 0;
	bool first = true;
	FILE *f = open_memstream(&s, &len);

	if (!f)
		return NULL;
	for (unsigned i = 0; i < sc->depth; i++) {
		if (sc->stack[i].kind != SCOPE_NS)
			continue;
		(void)fprintf(f, "%s%.*s", first ? "" : "::", (int)sc->stack[i].name_len,
			      sc->stack[i].name);
		first = false;
	}
	return fclose(f) == 0 ? s : (free(s), NULL);
}

static bool in_extern_c(const struct scan *sc)
{
	for (unsigned i = 0; i < sc->depth; i++)
		if (sc->stack[i].kind == SCOPE_EXTERN_C)
			return true;
	return false;
}

/* At namespace scope: no class, function or other braces around. */
static bool at_namespace_scope(const struct scan *sc)
{
	if (sc->overflow)
		return false;
	for (unsigned i = 0; i < sc->depth; i++)
		if (sc->stack[i].kind == SCOPE_OTHER)
			return false;
	return true;
}

/* ---- kernels ---- */

static bool attribute_word(const struct tok *t)
{
	static const char *const words[] = { "__attribute__", "__declspec",       "alignas",
					     "decltype",      "__align__",        "noexcept",
					     "throw",         "__launch_bounds__" };

	for (unsigned i = 0; i < ARRAY_SIZE(words); i++)
		if (tok_is(t, words[i]))
			return true;
	return false;
}

static int kernel_add(struct scan *sc, const struct tok *name, unsigned nname,
		      const struct tok *params, unsigned nparams, bool c_linkage)
{
	struct wrk_cuscan *o = sc->out;
	struct wrk_cuscan_kernel k = { .c_linkage = c_linkage };
	size_t len = 0;
	int depth = 0;
	bool skipping = false, any = false;
	FILE *f;

	if (o->nkernels == KERNELS_MAX)
		return -E2BIG;
	/* The parameters without their default arguments. */
	f = open_memstream(&k.params, &len);
	if (!f)
		return -ENOMEM;
	for (unsigned i = 0; i < nparams; i++) {
		const struct tok *t = &params[i];

		if (depth == 0 && tok_punct(t, '='))
			skipping = true;
		else if (depth == 0 && tok_punct(t, ','))
			skipping = false;
		depth += tok_punct(t, '(') || tok_punct(t, '[') || tok_punct(t, '{');
		depth -= tok_punct(t, ')') || tok_punct(t, ']') || tok_punct(t, '}');
		if (skipping)
			continue;
		(void)fprintf(f, "%s%.*s", any && t->space ? " " : "", (int)t->n, t->s);
		any = true;
	}
	if (fclose(f) != 0)
		k.params = NULL;
	f = open_memstream(&k.name, &len);
	if (f) {
		put_tokens(f, name, nname);
		if (fclose(f) != 0)
			k.name = NULL;
	}
	k.scope = scope_path(sc);
	if (!k.scope || !k.name || !k.params)
		goto err;
	if ((o->nkernels & (o->nkernels - 1)) == 0) {
		struct wrk_cuscan_kernel *ks =
			realloc(o->kernels, MAX(2u * o->nkernels, 8u) * sizeof(*ks));
		if (!ks)
			goto err;
		o->kernels = ks;
	}
	o->kernels[o->nkernels++] = k;
	return 0;
err:
	free(k.scope);
	free(k.name);
	free(k.params);
	return -ENOMEM;
}

/*
 * After __global__ (at l): its declarator "name(params)", then up to the ';' or '{' that
 * ends the declaration. A definition (a '{') of a function is a kernel.
 */
static int kernel_decl(struct scan *sc, struct lexer l, bool c_linkage)
{
	struct tok *d = sc->buf;
	unsigned n = 0, name_at = 0, name_n = 0, open = 0, close = 0;
	int parens = 0, skip = 0;
	bool found = false;

	while (n < DECL_TOKENS_MAX && lex(&l, &d[n])) {
		struct tok *t = &d[n++];

		if (!found && skip == 0 && tok_punct(t, '(') && n >= 2 && d[n - 2].kind == 'i' &&
		    !attribute_word(&d[n - 2])) {
			name_at = n - 2;
			while (name_at >= 3 && tok_punct(&d[name_at - 1], ':') &&
			       tok_punct(&d[name_at - 2], ':') && d[name_at - 3].kind == 'i')
				name_at -= 3;
			name_n = n - 1 - name_at;
			open = n;
			found = true;
			parens = 1;
			continue;
		}
		if (!found) {
			skip += tok_punct(t, '(') - tok_punct(t, ')');
			if (tok_punct(t, ';') || tok_punct(t, '{'))
				return 0;
			continue;
		}
		if (close == 0) {
			parens += tok_punct(t, '(') - tok_punct(t, ')');
			if (parens == 0)
				close = n - 1;
			continue;
		}
		parens += tok_punct(t, '(') - tok_punct(t, ')');
		if (parens == 0 && tok_punct(t, ';'))
			return 0;
		if (parens == 0 && tok_punct(t, '{'))
			return kernel_add(sc, &d[name_at], name_n, &d[open], close - open,
					  c_linkage);
	}
	return 0;
}

/* ---- extern __shared__ ---- */

/* The Itanium name of a variable `name` declared where the scan is: "name" in the global
 * namespace or under extern "C", else "_ZN<len><ns>...<len><name>E". */
static char *variable_symbol(const struct scan *sc, const struct tok *name)
{
	char *s = NULL;
	size_t len = 0;
	bool nested = false, c = in_extern_c(sc);
	FILE *f = open_memstream(&s, &len);

	if (!f)
		return NULL;
	for (unsigned i = 0; i < sc->depth && !c; i++) {
		const struct scope *ns = &sc->stack[i];

		if (ns->kind != SCOPE_NS)
			continue;
		if (!nested)
			(void)fputs("_ZN", f);
		nested = true;
		if (ns->name_len == 0)
			(void)fputs("12_GLOBAL__N_1", f);
		for (size_t a = 0, b; a < ns->name_len; a = b + 2) {
			const char *sep = memmem(ns->name + a, ns->name_len - a, "::", 2);

			b = sep ? (size_t)(sep - ns->name) : ns->name_len;
			(void)fprintf(f, "%zu%.*s", b - a, (int)(b - a), ns->name + a);
		}
	}
	if (nested)
		(void)fprintf(f, "%zu%.*sE", name->n, (int)name->n, name->s);
	else
		(void)fprintf(f, "%.*s", (int)name->n, name->s);
	return fclose(f) == 0 ? s : (free(s), NULL);
}

/* After extern ... __shared__ (at l): the array's name, the identifier before its '['. */
static int shared_decl(struct scan *sc, struct lexer l)
{
	struct wrk_cuscan *o = sc->out;
	struct tok t, last = { 0 };
	unsigned n = 0;
	int parens = 0;
	char *sym;

	while (n++ < DECL_TOKENS_MAX && lex(&l, &t) && !tok_punct(&t, ';')) {
		parens += tok_punct(&t, '(') - tok_punct(&t, ')');
		if (parens == 0 && tok_punct(&t, '[') && last.kind == 'i')
			break;
		last = t;
	}
	if (last.kind != 'i' || !tok_punct(&t, '['))
		return 0;
	sym = variable_symbol(sc, &last);
	if (!sym)
		return -ENOMEM;
	for (unsigned i = 0; i < o->nshared; i++)
		if (strcmp(o->shared[i], sym) == 0) {
			free(sym);
			return 0;
		}
	if (o->nshared == SHARED_MAX) {
		free(sym);
		return -E2BIG;
	}
	if ((o->nshared & (o->nshared - 1)) == 0) {
		char **s = realloc(o->shared, MAX(2u * o->nshared, 8u) * sizeof(*s));

		if (!s) {
			free(sym);
			return -ENOMEM;
		}
		o->shared = s;
	}
	o->shared[o->nshared++] = sym;
	return 0;
}

/* ---- __device__ and __constant__ variables ---- */

/* A word that cannot name a variable: the declaration's type, not its declarator. */
static bool type_word(const struct tok *t)
{
	static const char *const words[] = { "int",          "char",       "short",   "long",
					     "float",        "double",     "bool",    "void",
					     "signed",       "unsigned",   "const",   "volatile",
					     "auto",         "static",     "inline",  "constexpr",
					     "__restrict__", "__restrict", "restrict" };

	for (unsigned i = 0; i < ARRAY_SIZE(words); i++)
		if (tok_is(t, words[i]))
			return true;
	return false;
}

/* A word that makes the declaration one the reading leaves out. */
static bool not_a_variable(const struct tok *t)
{
	static const char *const words[] = {
		"__gpux_shared__", "thread_local", "__thread", "typedef", "using",  "operator",
		"struct",          "class",        "union",    "enum",    "friend", "template"
	};

	for (unsigned i = 0; i < ARRAY_SIZE(words); i++)
		if (tok_is(t, words[i]))
			return true;
	return false;
}

static int global_add(struct scan *sc, const struct tok *name)
{
	struct wrk_cuscan *o = sc->out;
	struct wrk_cuscan_global g = { 0 };

	g.symbol = variable_symbol(sc, name);
	if (!g.symbol)
		return -ENOMEM;
	for (unsigned i = 0; i < o->nglobals; i++)
		if (strcmp(o->globals[i].symbol, g.symbol) == 0) {
			free(g.symbol);
			return 0;
		}
	if (o->nglobals == GLOBALS_MAX) {
		free(g.symbol);
		return -E2BIG;
	}
	g.scope = scope_path(sc);
	g.name = strndup(name->s, name->n);
	if (!g.scope || !g.name)
		goto err;
	if ((o->nglobals & (o->nglobals - 1)) == 0) {
		struct wrk_cuscan_global *gs =
			realloc(o->globals, MAX(2u * o->nglobals, 8u) * sizeof(*gs));
		if (!gs)
			goto err;
		o->globals = gs;
	}
	o->globals[o->nglobals++] = g;
	return 0;
err:
	free(g.symbol);
	free(g.scope);
	free(g.name);
	return -ENOMEM;
}

/*
 * After __device__ or __constant__ at namespace scope (at l): a definition of variables,
 * "T a [= ...], *b[4] {...};", names each (the identifier before its '=', '[', '{', ',' or
 * ';'); a function ("T f(...)"), a type or a thread's variable none. Attributes and template
 * arguments of the type are passed over.
 */
static int global_decl(struct scan *sc, struct lexer l)
{
	struct tok t, last = { 0 };
	unsigned n = 0;
	int depth = 0, angle = 0, r;
	bool init = false; /* after a declarator's name: its bounds or initializer */

	while (n++ < DECL_TOKENS_MAX && lex(&l, &t)) {
		if (t.kind == 'i' && not_a_variable(&t))
			return 0;
		if (depth > 0) {
			depth += tok_punct(&t, '(') || tok_punct(&t, '[') || tok_punct(&t, '{');
			depth -= tok_punct(&t, ')') || tok_punct(&t, ']') || tok_punct(&t, '}');
			continue;
		}
		if (init) {
			if (tok_punct(&t, ';'))
				return 0;
			if (tok_punct(&t, ',')) {
				init = false;
				last = (struct tok){ 0 };
			}
			depth += tok_punct(&t, '(') || tok_punct(&t, '[') || tok_punct(&t, '{');
			continue;
		}
		if (tok_punct(&t, '<') || (angle > 0 && tok_punct(&t, '>'))) {
			angle += tok_punct(&t, '<') ? 1 : -1;
			continue;
		}
		if (angle > 0)
			continue;
		if (tok_punct(&t, '(')) {
			/* An attribute's arguments; else a function, or a declarator the reading
			 * does not follow ("int (*f)(int)"). */
			if (last.kind != 'i' || !attribute_word(&last))
				return 0;
			depth = 1;
			continue;
		}
		if (tok_punct(&t, ';') || tok_punct(&t, ',') || tok_punct(&t, '=') ||
		    tok_punct(&t, '[') || tok_punct(&t, '{')) {
			if (last.kind != 'i' || type_word(&last) || attribute_word(&last))
				return 0;
			r = global_add(sc, &last);
			if (r < 0 || tok_punct(&t, ';'))
				return r;
			init = !tok_punct(&t, ',');
			depth = tok_punct(&t, '[') || tok_punct(&t, '{');
			last = (struct tok){ 0 };
			continue;
		}
		last = t;
	}
	return 0;
}

/* ---- scopes ---- */

static void push(struct scan *sc, enum scope_kind kind, const char *name, size_t len)
{
	if (sc->depth == DEPTH_MAX) {
		sc->overflow++;
		return;
	}
	sc->stack[sc->depth++] = (struct scope){ kind, name, len };
}

static void pop(struct scan *sc)
{
	if (sc->overflow)
		sc->overflow--;
	else if (sc->depth)
		sc->depth--;
}

/* After `namespace` (at *l): a definition "[inline] namespace [a::b] {" opens a scope and
 * is passed over; an alias or anything else is left to the main loop. */
static bool namespace_decl(struct scan *sc, struct lexer *l)
{
	struct lexer at = *l;
	struct tok t, first = { 0 }, last = { 0 };

	while (lex(&at, &t)) {
		if (tok_punct(&t, '{')) {
			push(sc, SCOPE_NS, first.s ? first.s : "",
			     first.s ? (size_t)(last.s + last.n - first.s) : 0);
			*l = at;
			return true;
		}
		if (t.kind != 'i' && !tok_punct(&t, ':'))
			return false;
		if (!first.s)
			first = t;
		last = t;
	}
	return false;
}

int wrk_cuscan_run(const char *text, size_t len, const char *user_dir, struct wrk_cuscan *ret)
{
	struct lexer l = { .p = text,
			   .end = text + len,
			   .line_start = true,
			   .user_dir = user_dir,
			   .user_dir_len = strlen(user_dir) };
	_cleanup_(freep) struct scan *sc = calloc(1, sizeof(*sc));
	struct wrk_cuscan out = { 0 };
	struct tok t;
	int r = 0;

	if (!sc)
		return -ENOMEM;
	sc->out = &out;
	while (r == 0 && lex(&l, &t)) {
		if (t.user && t.kind == 'i' &&
		    (tok_is(&t, "asm") || tok_is(&t, "__asm__") || tok_is(&t, "__asm")))
			r = unsupported(sc, &l, &t, "inline assembly (asm)");
		else if (t.user && tok_punct(&t, '<') && tok_punct(&sc->prev, '<') &&
			 tok_punct(&sc->prev2, '<') && !t.space && !sc->prev.space)
			r = unsupported(sc, &l, &t,
					"a kernel launch in device code (<<<...>>>: "
					"dynamic parallelism)");
		else if (tok_is(&t, "__gpux_global__") && t.user && !sc->decl_template &&
			 at_namespace_scope(sc))
			r = kernel_decl(sc, l, sc->decl_extern_c || in_extern_c(sc));
		else if (tok_is(&t, "__gpux_shared__") && sc->decl_extern)
			r = shared_decl(sc, l);
		else if ((tok_is(&t, "__gpux_device__") || tok_is(&t, "__gpux_constant__")) &&
			 t.user && !sc->decl_template && !sc->decl_extern && at_namespace_scope(sc))
			r = global_decl(sc, l);
		else if (tok_is(&t, "template"))
			sc->decl_template = true;
		else if (tok_is(&t, "extern"))
			sc->decl_extern = true;
		else if (t.kind == 's' && tok_is(&sc->prev, "extern") && tok_is(&t, "\"C\""))
			sc->decl_extern_c = true;
		else if (tok_is(&t, "namespace") && namespace_decl(sc, &l))
			/* Passed over to its '{': what follows starts a declaration. */
			t = (struct tok){ .kind = 'p', .s = ";", .n = 1 };

		if (tok_punct(&t, '{')) {
			if (tok_is(&sc->prev, "\"C\"") && tok_is(&sc->prev2, "extern"))
				push(sc, SCOPE_EXTERN_C, NULL, 0);
			else if (sc->prev.kind == 's' && tok_is(&sc->prev2, "extern"))
				push(sc, SCOPE_LINK, NULL, 0);
			else
				push(sc, SCOPE_OTHER, NULL, 0);
		} else if (tok_punct(&t, '}')) {
			pop(sc);
		}
		if (tok_punct(&t, ';') || tok_punct(&t, '{') || tok_punct(&t, '}'))
			sc->decl_template = sc->decl_extern = sc->decl_extern_c = false;
		sc->prev2 = sc->prev;
		sc->prev = t;
	}
	if (r == 0 && l.library && !out.unsupported) {
		out.unsupported = wrk_strdup_printf("%s (the toolkit's library)", l.library);
		r = out.unsupported ? 0 : -ENOMEM;
	}
	if (r < 0) {
		wrk_cuscan_done(&out);
		return r;
	}
	*ret = out;
	return 0;
}

void wrk_cuscan_done(struct wrk_cuscan *s)
{
	for (unsigned i = 0; i < s->nkernels; i++) {
		free(s->kernels[i].scope);
		free(s->kernels[i].name);
		free(s->kernels[i].params);
	}
	for (unsigned i = 0; i < s->nshared; i++)
		free(s->shared[i]);
	for (unsigned i = 0; i < s->nglobals; i++) {
		free(s->globals[i].scope);
		free(s->globals[i].name);
		free(s->globals[i].symbol);
	}
	free(s->globals);
	free(s->kernels);
	free(s->shared);
	free(s->unsupported);
	memset(s, 0, sizeof(*s));
}
