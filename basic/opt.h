/* SPDX-License-Identifier: MIT */
/* ipc/opt.h: command lines from a table: getopt, checked values, the usage text, an argv. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/*
 * A program's options are an array of struct ipc_opt (ipc/options.h has gpuxd's and
 * gpux-worker's, in one table), each saying where its value goes in the program's options
 * struct. From it come the long options given to getopt, the parsing of every value (each
 * checked: a number in its range, a word of its list, text not empty), the usage text and,
 * the other way, an argv that gives a struct's values to another program.
 */
enum ipc_opt_kind {
	IPC_OPT_SECTION, /* no option: a heading in the usage text (help) */
	IPC_OPT_FLAG,    /* no value: sets a bool */
	IPC_OPT_UINT,    /* a decimal number in [min, max], into an integer field of 4 or 8 bytes */
	IPC_OPT_MODE,    /* an octal number in [min, max] (a file's mode), likewise */
	IPC_OPT_TEXT,    /* a string, not empty, borrowed from argv, into a const char * */
	IPC_OPT_WORD,    /* one of `words` ("auto|cuda|host"), borrowed likewise */
	IPC_OPT_PARSE,   /* by `parse`, which writes what it likes in the options struct */
};

struct ipc_opt {
	const char *name; /* the long name, without "--" */
	enum ipc_opt_kind kind;
	const char *arg;  /* the value's name in the usage text ("MS") */
	const char *help; /* its lines of the usage text, '\n' between them */
	uint64_t min, max;
	/* A WORD option's words; a PARSE option may name what it takes too, for completion. */
	const char *words;
	/* 0 or -errno; `why` says what is wrong with `value`, after "--name: ". */
	int (*parse)(const char *value, void *opts, char *why, size_t why_len);
	size_t offset; /* of its field in the options struct */
	size_t size;   /* of that field */
};

/* A row's field: `.offset = ..., .size = ...` of `field` in `type`. */
#define IPC_OPT_FIELD(type, field)                                                                 \
	.offset = offsetof(type, field), .size = sizeof(((type *)0)->field)

struct ipc_opt_prog {
	const char *name;     /* "gpuxd": the start of every message */
	const char *synopsis; /* the usage text's first lines, after "usage: " */
	const char *version;  /* what --version prints after the name; NULL: no --version */
	const struct ipc_opt *opts;
	size_t nopts;
	size_t size; /* of the options struct */
};

#define IPC_OPT_HELP 1    /* -h or --help was given */
#define IPC_OPT_VERSION 2 /* --version was given */

/*
 * Parse argv into *opts (a struct of prog->size bytes, holding the defaults), which is
 * written only when every option is good. -h and --help, and --version if prog has a
 * version, are the program's too. Returns 0, IPC_OPT_HELP, IPC_OPT_VERSION (the rest of
 * argv is not looked at), or -EINVAL with why filled: the option and what is wrong with it
 * ("--slots: 100 is more than 64"); -ENOMEM.
 */
int ipc_opt_parse(const struct ipc_opt_prog *prog, int argc, char **argv, void *opts, char *why,
		  size_t why_len);

/* The usage text: the synopsis, then every option with its help. */
void ipc_opt_usage(const struct ipc_opt_prog *prog, FILE *f);

/*
 * A bash completion of the program's options: their names, and the values of each, from its
 * row: the words of `words`; files for a value named PATH or FILE, folders for DIR, groups
 * for GROUP; nothing else for other values. Returns 0 or -EIO.
 */
int ipc_opt_bash(const struct ipc_opt_prog *prog, FILE *f);

/*
 * An argv built in storage of fixed size: v has room for cap pointers (the last one NULL),
 * text for text_cap bytes of the numbers written out. Adding past either is -E2BIG.
 */
struct ipc_argv {
	char **v;
	size_t cap, n;
	char *text;
	size_t text_cap, text_used;
};

void ipc_argv_init(struct ipc_argv *a, char **v, size_t cap, char *text, size_t text_cap);
/* Append s, which must live as long as the argv: 0 or -E2BIG. */
int ipc_argv_add(struct ipc_argv *a, const char *s);

/*
 * Append the options of prog whose value in *opts is not the one in *defaults (a flag: that
 * is set; a text: that is not NULL either): "--name" and its value written out, as
 * ipc_opt_parse() reads it back. Texts are borrowed from *opts. Returns 0, -E2BIG, or
 * -EINVAL when a value is one that ipc_opt_parse() would refuse (out of its range, not a
 * word of its list, empty text).
 */
int ipc_opt_argv(const struct ipc_opt_prog *prog, const void *opts, const void *defaults,
		 struct ipc_argv *a);
