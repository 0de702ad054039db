/* SPDX-License-Identifier: MIT */
/* worker/sandbox-image.c: a host module's image, read as the loader reads it, before dlopen(). */
#include <elf.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ipc/macro.h"
#include "sandbox.h"
#include "wrk.h"

#if defined(__x86_64__)
#define R_IRELATIVE R_X86_64_IRELATIVE
#elif defined(__aarch64__)
#define R_IRELATIVE R_AARCH64_IRELATIVE
#endif

/* More than any object has: program headers (a linker writes about ten), entries of the
 * dynamic array (a few dozen), dynamic symbols. */
#define PH_MAX 64u
#define DYN_MAX 4096u
#define SYMS_MAX (1u << 20)

/*
 * The loader reads the image through its program headers, never its section table: it maps
 * each PT_LOAD page by page (a later segment's pages over an earlier one's), then reads the
 * dynamic array where PT_DYNAMIC says it is mapped, until DT_NULL, and what its tags point
 * at (relocations, symbols, hash tables, strings) likewise. So does this check: bytes are
 * read at an address only where exactly one PT_LOAD maps that address's pages, from the
 * file; anything else (bytes two segments map, or none, or zeros past a segment's file) is
 * not vouched for, and the module is refused.
 */
struct view {
	const uint8_t *image;
	size_t len;
	const Elf64_Phdr *ph;
	unsigned nph;
	uint64_t page;
};

/* The size bytes at address addr as the loader maps them, or NULL. */
static const uint8_t *at(const struct view *v, uint64_t addr, uint64_t size)
{
	const Elf64_Phdr *hit = NULL;
	uint64_t end, lo, hi, off;

	if (size == 0 || !add_ok(addr, size, &end) || !add_ok(end, v->page - 1, &hi))
		return NULL;
	lo = addr & ~(v->page - 1);
	hi &= ~(v->page - 1);
	for (unsigned i = 0; i < v->nph; i++) {
		const Elf64_Phdr *p = &v->ph[i];
		uint64_t pend;

		if (p->p_type != PT_LOAD || !add_ok(p->p_vaddr, p->p_memsz, &pend) ||
		    !add_ok(pend, v->page - 1, &pend))
			continue;
		if ((p->p_vaddr & ~(v->page - 1)) >= hi || (pend & ~(v->page - 1)) <= lo)
			continue;
		if (hit)
			return NULL;
		hit = p;
	}
	if (!hit || addr < hit->p_vaddr || end - hit->p_vaddr > hit->p_filesz)
		return NULL;
	off = hit->p_offset + (addr - hit->p_vaddr);
	return off >= hit->p_offset && range_ok(off, size, v->len) ? v->image + off : NULL;
}

/* The tags the loader takes from the dynamic array, the last of each as it does. */
struct dyn {
	uint64_t val[DT_NUM];
	bool has[DT_NUM];
	uint64_t gnu_hash;
	bool has_gnu_hash;
};

/* What a tag makes the loader do that the sandbox cannot allow, or NULL. */
static const char *tag_refused(int64_t tag)
{
	switch (tag) {
	case DT_INIT:
		return "DT_INIT (an _init function)";
	case DT_FINI:
		return "DT_FINI (a _fini function)";
	case DT_INIT_ARRAY:
		return "DT_INIT_ARRAY (constructors)";
	case DT_FINI_ARRAY:
		return "DT_FINI_ARRAY (destructors)";
	case DT_PREINIT_ARRAY:
		return "DT_PREINIT_ARRAY (constructors)";
	case DT_INIT_ARRAYSZ:
		return "DT_INIT_ARRAYSZ (constructors)";
	case DT_FINI_ARRAYSZ:
		return "DT_FINI_ARRAYSZ (destructors)";
	case DT_PREINIT_ARRAYSZ:
		return "DT_PREINIT_ARRAYSZ (constructors)";
	/* Objects loaded with it run their own constructors. */
	case DT_RPATH:
		return "DT_RPATH (a library path of its own)";
	case DT_RUNPATH:
		return "DT_RUNPATH (a library path of its own)";
	case DT_AUDIT:
	case DT_DEPAUDIT:
		return "DT_AUDIT (an audit library)";
	case DT_FILTER:
	case DT_AUXILIARY:
		return "DT_FILTER (another object in its place)";
	default:
		return NULL;
	}
}

/* Read the dynamic array into *ret: 0, or -EINVAL with *why naming the tag refused (NULL:
 * the array cannot be read). */
static int dyn_read(const struct view *v, const Elf64_Phdr *pd, struct dyn *ret,
		    const char **why)
{
	struct dyn d = { 0 };

	for (unsigned i = 0;; i++) {
		uint64_t addr = pd->p_vaddr + (uint64_t)i * sizeof(Elf64_Dyn);
		const uint8_t *p = i < DYN_MAX ? at(v, addr, sizeof(Elf64_Dyn)) : NULL;
		Elf64_Dyn e;

		if (!p) {
			*why = NULL;
			return -EINVAL;
		}
		memcpy(&e, p, sizeof(e));
		if (e.d_tag == DT_NULL)
			break;
		*why = tag_refused(e.d_tag);
		if (*why)
			return -EINVAL;
		if (e.d_tag == DT_GNU_HASH) {
			d.gnu_hash = e.d_un.d_ptr;
			d.has_gnu_hash = true;
		} else if (e.d_tag >= 0 && e.d_tag < DT_NUM) {
			d.val[e.d_tag] = e.d_un.d_val;
			d.has[e.d_tag] = true;
		}
	}
	*ret = d;
	return 0;
}

/*
 * One table of relocations (entries of `ent` bytes, r_info at 8 in both kinds): what in it
 * would run a resolver, or NULL. *syms: one past the highest symbol it names.
 */
static const char *relocs_check(const struct view *v, uint64_t addr, uint64_t size, uint64_t ent,
				uint64_t *syms)
{
	const uint8_t *p;

	if (size == 0)
		return NULL;
	p = at(v, addr, size);
	if (!p || size % ent)
		return "unreadable relocations";
	for (uint64_t o = 0; o < size; o += ent) {
		uint64_t info;

		memcpy(&info, p + o + 8, sizeof(info));
		if (ELF64_R_TYPE(info) == R_IRELATIVE)
			return "an IFUNC relocation";
		*syms = MAX(*syms, (uint64_t)ELF64_R_SYM(info) + 1);
	}
	return NULL;
}

/* A 32-bit word at addr, or false. */
static bool word(const struct view *v, uint64_t addr, uint32_t *ret)
{
	const uint8_t *p = at(v, addr, sizeof(*ret));

	if (!p)
		return false;
	memcpy(ret, p, sizeof(*ret));
	return true;
}

/*
 * How many symbols dlsym() can find, through DT_HASH or DT_GNU_HASH: it would run the
 * resolver of any of them asked for. -EINVAL when a table cannot be read (or says more than
 * SYMS_MAX).
 */
static int64_t syms_found(const struct view *v, const struct dyn *d)
{
	uint64_t n = 0;
	uint32_t h[4], top = 0;

	if (d->has[DT_HASH]) {
		/* nbucket, nchain: one chain entry per symbol. */
		if (!word(v, d->val[DT_HASH] + 4, &h[1]))
			return -EINVAL;
		n = h[1];
	}
	if (d->has_gnu_hash) {
		const uint8_t *buckets;
		uint64_t at_buckets, chain;

		/* nbuckets, symoffset (the first hashed symbol), bloom words (8 bytes each),
		 * bloom shift; the buckets, then a chain word per hashed symbol. */
		for (unsigned i = 0; i < 4; i++)
			if (!word(v, d->gnu_hash + 4 * i, &h[i]))
				return -EINVAL;
		at_buckets = d->gnu_hash + 16 + (uint64_t)h[2] * 8;
		chain = at_buckets + (uint64_t)h[0] * 4;
		buckets = h[0] ? at(v, at_buckets, (uint64_t)h[0] * 4) : NULL;
		if (h[0] && !buckets)
			return -EINVAL;
		for (uint32_t b = 0; b < h[0]; b++) {
			uint32_t s;

			memcpy(&s, buckets + 4 * (size_t)b, sizeof(s));
			top = MAX(top, s);
		}
		/* The last chain (from the highest bucket's symbol) ends with its low bit set. */
		while (top >= h[1] && top <= SYMS_MAX) {
			uint32_t c;

			if (!word(v, chain + 4 * (uint64_t)(top - h[1]), &c))
				return -EINVAL;
			if (c & 1)
				break;
			top++;
		}
		n = MAX(n, MAX((uint64_t)top + 1, (uint64_t)h[1]));
	}
	return n > SYMS_MAX ? -EINVAL : (int64_t)n;
}

/* What the dynamic array's relocations and symbols would run as the module loads or is
 * looked up: IFUNC resolvers of its own. NULL when nothing. */
static const char *dyn_check(const struct view *v, const struct dyn *d)
{
	uint64_t syms = 0;
	const uint8_t *p;
	const char *what = NULL;
	int64_t found;

	if (d->has[DT_RELA])
		what = relocs_check(v, d->val[DT_RELA], d->val[DT_RELASZ], sizeof(Elf64_Rela),
				    &syms);
	if (!what && d->has[DT_REL])
		what = relocs_check(v, d->val[DT_REL], d->val[DT_RELSZ], sizeof(Elf64_Rel), &syms);
	if (!what && d->has[DT_JMPREL])
		what = relocs_check(v, d->val[DT_JMPREL], d->val[DT_PLTRELSZ],
				    d->val[DT_PLTREL] == DT_REL ? sizeof(Elf64_Rel)
								: sizeof(Elf64_Rela),
				    &syms);
	if (what)
		return what;
	found = syms_found(v, d);
	if (found < 0)
		return "an unreadable hash table";
	syms = MAX(syms, (uint64_t)found);
	if (syms == 0)
		return NULL;
	if (syms > SYMS_MAX || !d->has[DT_SYMTAB] ||
	    (d->has[DT_SYMENT] && d->val[DT_SYMENT] != sizeof(Elf64_Sym)) ||
	    !(p = at(v, d->val[DT_SYMTAB], syms * sizeof(Elf64_Sym))))
		return "an unreadable symbol table";
	for (uint64_t i = 0; i < syms; i++) {
		Elf64_Sym y;

		memcpy(&y, p + i * sizeof(y), sizeof(y));
		if (ELF64_ST_TYPE(y.st_info) == STT_GNU_IFUNC && y.st_shndx != SHN_UNDEF)
			return "an IFUNC symbol";
	}
	return NULL;
}

/* Each DT_NEEDED a name the library path resolves (not a path of the module's choosing). */
static const char *needed_check(const struct view *v, const Elf64_Phdr *pd, const struct dyn *d)
{
	const uint8_t *strtab = NULL;

	for (unsigned i = 0;; i++) {
		const uint8_t *p = at(v, pd->p_vaddr + (uint64_t)i * sizeof(Elf64_Dyn),
				      sizeof(Elf64_Dyn));
		const char *name;
		Elf64_Dyn e;

		/* dyn_read() read them all already. */
		if (!p)
			return "an unreadable dynamic segment";
		memcpy(&e, p, sizeof(e));
		if (e.d_tag == DT_NULL)
			return NULL;
		if (e.d_tag != DT_NEEDED)
			continue;
		if (!strtab && d->has[DT_STRTAB] && d->has[DT_STRSZ])
			strtab = at(v, d->val[DT_STRTAB], d->val[DT_STRSZ]);
		if (!strtab || e.d_un.d_val >= d->val[DT_STRSZ])
			return "a DT_NEEDED that cannot be read";
		name = (const char *)strtab + e.d_un.d_val;
		if (!memchr(name, '\0', d->val[DT_STRSZ] - e.d_un.d_val))
			return "a DT_NEEDED that cannot be read";
		if (strchr(name, '/'))
			return "a DT_NEEDED path (another object to load)";
	}
}

int wrk_sandbox_image_check(const uint8_t *image, size_t len, char **ret_msg)
{
	const Elf64_Ehdr *eh = (const Elf64_Ehdr *)image;
	struct view v = { .image = image, .len = len, .page = (uint64_t)sysconf(_SC_PAGESIZE) };
	const Elf64_Phdr *pd = NULL;
	const char *what = NULL;
	unsigned ndyn = 0;
	struct dyn d;

	if (len < sizeof(*eh) || memcmp(eh->e_ident, ELFMAG, SELFMAG) != 0 ||
	    eh->e_ident[EI_CLASS] != ELFCLASS64 || eh->e_type != ET_DYN ||
	    eh->e_phentsize != sizeof(Elf64_Phdr) ||
	    eh->e_phnum > PH_MAX || eh->e_phoff % _Alignof(Elf64_Phdr) ||
	    !range_ok(eh->e_phoff, (uint64_t)eh->e_phnum * sizeof(Elf64_Phdr), len)) {
		*ret_msg = strdup("the module is not a 64-bit shared object with program headers");
		return -EINVAL;
	}
	v.ph = (const Elf64_Phdr *)(image + eh->e_phoff);
	v.nph = eh->e_phnum;
	for (unsigned i = 0; i < v.nph; i++) {
		if (v.ph[i].p_type == PT_DYNAMIC) {
			pd = &v.ph[i];
			ndyn++;
		}
		if (v.ph[i].p_type == PT_GNU_STACK && (v.ph[i].p_flags & PF_X))
			what = "an executable stack (every thread's would be made executable)";
	}
	if (ndyn != 1) {
		*ret_msg = wrk_strdup_printf("the module has %u dynamic segments, not one", ndyn);
		return -EINVAL;
	}
	if (!what && dyn_read(&v, pd, &d, &what) < 0 && !what) {
		*ret_msg = strdup("the module's dynamic segment cannot be read as the loader "
				  "reads it");
		return -EINVAL;
	}
	if (!what)
		what = dyn_check(&v, &d);
	if (!what)
		what = needed_check(&v, pd, &d);
	if (!what)
		return 0;
	*ret_msg = wrk_strdup_printf("the module has %s: it would run code or load objects as it "
				     "is loaded or looked up, outside the sandbox of host kernels",
				     what);
	return -EINVAL;
}
