/* SPDX-License-Identifier: MIT */
/* worker/compile/knames.h: a module's kernel names: name expressions, C++ names, mangled symbols. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cuda-image.h"

/*
 * A kernel is asked for by the name its programmer wrote. The driver knows symbols: an
 * extern "C" kernel's name, or a C++ kernel's mangled one. Between the two:
 * - name expressions ("fill<float>", "reduce<int, 256>"): NVRTC lowered each that the module
 *   was compiled with (listed by the client, or an explicit instantiation in the source) to
 *   its symbol, kept in the module's image;
 * - a plain or qualified C++ name ("saxpy", "ns::saxpy"): the module's kernels (its symbol
 *   table, or PTX's .entry directives) whose mangled names say they are that function; one
 *   is the answer, several (overloads) an error naming them.
 */
struct wrk_knames;

/*
 * The names of the module whose image is img (copied: img may go afterwards), at most
 * max_bytes of them (a cubin's symbols may all name one long string). 0, -ENOMEM, or -E2BIG
 * past max_bytes.
 */
int wrk_knames_new(const struct wrk_cuimage *img, size_t max_bytes, struct wrk_knames **ret);
/* The same, of a module whose kernels' symbols are listed (the host back end's CUDA C++):
 * npairs (expression, symbol) pairs of strings in pairs, pairs_len bytes. */
int wrk_knames_new_list(const char *const *syms, unsigned nsyms, const char *pairs,
			size_t pairs_len, uint32_t npairs, size_t max_bytes,
			struct wrk_knames **ret);
void wrk_knames_free(struct wrk_knames *k);

/* The bytes k holds: its copies of names, and what points at them. */
size_t wrk_knames_bytes(const struct wrk_knames *k);

/* The symbol NVRTC lowered name expression `name` to, or NULL. Borrowed from k. */
const char *wrk_knames_lowered(const struct wrk_knames *k, const char *name);

/*
 * For a name the driver does not know as a symbol: the symbol of the one kernel that is the
 * C++ function `name` (borrowed from k). -ENOENT, or -ENOTUNIQ (ambiguous: several
 * overloads), with a message (to free) that names the candidates or the module's kernels.
 */
int wrk_knames_match(const struct wrk_knames *k, const char *name, const char **ret_symbol,
		     char **ret_msg);

/*
 * The symbol of a variable named by its plain or qualified C++ name ("x", "::x", "ns::x"), as
 * a compiler mangles it (Itanium): "x", or "_ZN2ns1xE" (named namespaces only), into buf of
 * cap bytes. 0, or -EINVAL for a name that is not identifiers joined by "::".
 */
int wrk_knames_variable(const char *name, char *buf, size_t cap);

/* Name expressions compare as C++ reads them: blanks count only between two identifier
 * characters ("reduce<int,256>" is "reduce< int, 256 >"). */
bool wrk_knames_same(const char *a, const char *b);

/*
 * The name expressions of the kernel templates a source instantiates explicitly
 * ("template __global__ void fill<float>(float *, int);" gives "fill<float>"), for fn(expr,
 * len, userdata); fn < 0 stops it with that value. A reading of tokens, not C++: what it
 * takes for an instantiation is checked by NVRTC, and what hides in macros is not seen.
 */
typedef int wrk_expr_fn(const char *expr, size_t len, void *userdata);
int wrk_knames_scan(const char *src, size_t len, wrk_expr_fn *fn, void *userdata);
