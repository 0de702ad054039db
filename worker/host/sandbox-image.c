/* SPDX-License-Identifier: MIT */
/* worker/host/sandbox-image.c: a host module's image, read as the loader reads it, before dlopen(). */
#include <assert.h>
#include <elf.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "macro.h"
#include "sandbox.h"
#include "wrk.h"

#if defined(__x86_64__)
#define R_IRELATIVE R_X86_64_IRELATIVE
#define R_COPY R_X86_64_COPY
#define R_TLSDESC R_X86_64_TLSDESC
#elif defined(__aarch64__)
#define R_IRELATIVE R_AARCH64_IRELATIVE
#define R_COPY R_AARCH64_COPY
#define R_TLSDESC R_AARCH64_TLSDESC
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

/* The tags the loader takes from the dynamic array, the last of each as it does, and how many
 * entries it reads (DT_NULL included). */
struct dyn {
	uint64_t val[DT_NUM];
	bool has[DT_NUM];
	uint64_t gnu_hash, versym;
	bool has_gnu_hash, has_versym;
	uint64_t count;
};

_Static_assert(DT_RELR < DT_NUM && DT_RELRSZ < DT_NUM && DT_RELRENT < DT_NUM, "RELR tags");

/* What an entry makes the loader do that the sandbox cannot allow, or NULL. */
static const char *tag_refused(const Elf64_Dyn *e)
{
	switch (e->d_tag) {
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
	/* The loader makes read-only segments writable while it relocates: then nothing the
	 * module maps is out of its relocations' reach. */
	case DT_TEXTREL:
		return "DT_TEXTREL (relocations of read-only segments)";
	case DT_FLAGS:
		return e->d_un.d_val & DF_TEXTREL ? "DF_TEXTREL (relocations of read-only segments)"
						  : NULL;
	default:
		return NULL;
	}
}

/* Read the dynamic array into *ret: 0, or -EINVAL with *why naming the tag refused (NULL:
 * the array cannot be read). */
static int dyn_read(const struct view *v, const Elf64_Phdr *pd, struct dyn *ret, const char **why)
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
		if (e.d_tag == DT_NULL) {
			d.count = i + 1;
			break;
		}
		*why = tag_refused(&e);
		if (*why)
			return -EINVAL;
		if (e.d_tag == DT_GNU_HASH) {
			d.gnu_hash = e.d_un.d_ptr;
			d.has_gnu_hash = true;
		} else if (e.d_tag == DT_VERSYM) {
			d.versym = e.d_un.d_ptr;
			d.has_versym = true;
		} else if (e.d_tag >= 0 && e.d_tag < DT_NUM) {
			d.val[e.d_tag] = e.d_un.d_val;
			d.has[e.d_tag] = true;
		}
	}
	*ret = d;
	return 0;
}

/*
 * What the loader reads from the mapped module once it relocates it, and as dlsym() looks a
 * symbol up: the dynamic array (it keeps pointers to its entries, and reads them as it goes),
 * the relocation tables, the symbols it looks at, their hash tables, strings and versions
 * (DT_VERSYM; the definitions and needs are read before the first relocation). A relocation
 * writes wherever the module is writable, RELRO included (made read-only once relocation is
 * done), so one that wrote these would make a later step read what this check never saw: a
 * relocation turned into an IRELATIVE, a symbol into an IFUNC, DT_SYMTAB pointed at another
 * table. No relocation may write a byte of them, wherever they lie.
 */
#define SPANS_MAX 12u

struct spans {
	uint64_t lo[SPANS_MAX], end[SPANS_MAX];
	unsigned n;
};

/* Add [addr, addr + size), which at() has read (so it does not wrap). */
static void span_add(struct spans *s, uint64_t addr, uint64_t size)
{
	assert(s->n < SPANS_MAX);
	s->lo[s->n] = addr;
	s->end[s->n] = addr + size;
	s->n++;
}

/* Whether [addr, addr + size) meets a span, or wraps. */
static bool span_hit(const struct spans *s, uint64_t addr, uint64_t size)
{
	uint64_t end;

	if (!add_ok(addr, size, &end))
		return true;
	for (unsigned i = 0; i < s->n; i++)
		if (addr < s->end[i] && s->lo[i] < end)
			return true;
	return false;
}

#define WRITES_TABLES "a relocation that writes the loader's own tables as it relocates"

/* A table of relocations: entries of `ent` bytes, r_offset at 0 and r_info at 8 in both
 * kinds. */
struct rtab {
	uint64_t addr, size, ent;
};

/* The dynamic array's relocation tables (RELR aside) into t: how many. */
static unsigned rtabs_get(const struct dyn *d, struct rtab t[3])
{
	unsigned n = 0;

	if (d->has[DT_RELA])
		t[n++] = (struct rtab){ d->val[DT_RELA], d->val[DT_RELASZ], sizeof(Elf64_Rela) };
	if (d->has[DT_REL])
		t[n++] = (struct rtab){ d->val[DT_REL], d->val[DT_RELSZ], sizeof(Elf64_Rel) };
	if (d->has[DT_JMPREL])
		t[n++] = (struct rtab){ d->val[DT_JMPREL], d->val[DT_PLTRELSZ],
					d->val[DT_PLTREL] == DT_REL ? sizeof(Elf64_Rel)
								    : sizeof(Elf64_Rela) };
	return n;
}

/*
 * How many bytes the loader may write at a relocation's r_offset, or 0 with *why for a type
 * refused: an IRELATIVE runs a resolver of the module's, a COPY (an executable's, never a
 * shared object's) copies as many bytes as a symbol says. A TLS descriptor is two words; any
 * other type one, even one that writes none or fewer: the loader takes the first
 * DT_RELACOUNT relocations for RELATIVEs, whatever their type says.
 */
static unsigned reloc_width(uint32_t type, const char **why)
{
	switch (type) {
	case R_IRELATIVE:
		*why = "an IFUNC relocation";
		return 0;
	case R_COPY:
		*why = "a copy relocation";
		return 0;
	case R_TLSDESC:
		return 16;
	default:
		return 8;
	}
}

/* One table of relocations: what in it would run a resolver or copy, or NULL. *syms: one
 * past the highest symbol it names. Its bytes go into s. */
static const char *relocs_check(const struct view *v, const struct rtab *t, struct spans *s,
				uint64_t *syms)
{
	const char *why = NULL;
	const uint8_t *p;

	if (t->size == 0)
		return NULL;
	p = at(v, t->addr, t->size);
	if (!p || t->size % t->ent)
		return "unreadable relocations";
	for (uint64_t o = 0; o < t->size; o += t->ent) {
		uint64_t info;

		memcpy(&info, p + o + 8, sizeof(info));
		if (reloc_width(ELF64_R_TYPE(info), &why) == 0)
			return why;
		*syms = MAX(*syms, (uint64_t)ELF64_R_SYM(info) + 1);
	}
	span_add(s, t->addr, t->size);
	return NULL;
}

/* Whether a relocation of a table relocs_check() took writes a byte of s. */
static bool relocs_write(const struct view *v, const struct rtab *t, const struct spans *s)
{
	const uint8_t *p = t->size ? at(v, t->addr, t->size) : NULL;
	const char *why = NULL;

	for (uint64_t o = 0; p && o < t->size; o += t->ent) {
		uint64_t off, info;

		memcpy(&off, p + o, sizeof(off));
		memcpy(&info, p + o + 8, sizeof(info));
		if (span_hit(s, off, reloc_width(ELF64_R_TYPE(info), &why)))
			return true;
	}
	return false;
}

/* The RELR table (packed RELATIVEs, DT_RELR): NULL, or why it is refused. Its bytes go into
 * s; *ret_p and *ret_size: where it is (NULL: none). */
static const char *relr_check(const struct view *v, const struct dyn *d, struct spans *s,
			      const uint8_t **ret_p, uint64_t *ret_size)
{
	const uint8_t *p = NULL;
	uint64_t size = d->has[DT_RELR] ? d->val[DT_RELRSZ] : 0;

	if (size) {
		p = at(v, d->val[DT_RELR], size);
		if (!p || size % sizeof(uint64_t) ||
		    (d->has[DT_RELRENT] && d->val[DT_RELRENT] != sizeof(uint64_t)))
			return "unreadable relocations";
		span_add(s, d->val[DT_RELR], size);
	}
	*ret_p = p;
	*ret_size = size;
	return NULL;
}

/*
 * Whether the RELR table writes a byte of s (or cannot be followed). An even entry is the
 * address of a word the loader adds its base to; an odd one a bitmap of the 63 words after
 * the last it wrote or passed over: bit b (1-63) stands for word b - 1.
 */
static bool relr_write(const uint8_t *p, uint64_t size, const struct spans *s)
{
	uint64_t where = 0;
	bool based = false;

	for (uint64_t o = 0; o < size; o += sizeof(uint64_t)) {
		uint64_t e;

		memcpy(&e, p + o, sizeof(e));
		if (!(e & 1)) {
			if (span_hit(s, e, 8))
				return true;
			where = e + 8;
			based = true;
			continue;
		}
		/* A bitmap before any address: words from address 0, not the module's. */
		if (!based)
			return true;
		for (unsigned b = 1; b < 64; b++) {
			uint64_t a;

			if (((e >> b) & 1) &&
			    (!add_ok(where, (b - 1) * 8ull, &a) || span_hit(s, a, 8)))
				return true;
		}
		if (!add_ok(where, 63 * 8, &where))
			return true;
	}
	return false;
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
 * resolver of any of them asked for. The bytes of the tables it reads go into s. -EINVAL
 * when a table cannot be read (or says more than SYMS_MAX).
 */
static int64_t syms_found(const struct view *v, const struct dyn *d, struct spans *s)
{
	uint64_t n = 0, size;
	uint32_t h[4], top = 0;

	if (d->has[DT_HASH]) {
		/* nbucket, nchain, the buckets, then one chain entry per symbol. */
		if (!word(v, d->val[DT_HASH], &h[0]) || !word(v, d->val[DT_HASH] + 4, &h[1]))
			return -EINVAL;
		size = 8 + 4 * ((uint64_t)h[0] + h[1]);
		if (!at(v, d->val[DT_HASH], size))
			return -EINVAL;
		span_add(s, d->val[DT_HASH], size);
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
			uint32_t c;

			memcpy(&c, buckets + 4 * (size_t)b, sizeof(c));
			top = MAX(top, c);
		}
		/* The last chain (from the highest bucket's symbol) ends with its low bit set. */
		size = chain - d->gnu_hash;
		while (top >= h[1] && top <= SYMS_MAX) {
			uint32_t c;

			size = chain + 4 * (uint64_t)(top - h[1] + 1) - d->gnu_hash;
			if (!word(v, chain + 4 * (uint64_t)(top - h[1]), &c))
				return -EINVAL;
			if (c & 1)
				break;
			top++;
		}
		if (!at(v, d->gnu_hash, size))
			return -EINVAL;
		span_add(s, d->gnu_hash, size);
		n = MAX(n, MAX((uint64_t)top + 1, (uint64_t)h[1]));
	}
	return n > SYMS_MAX ? -EINVAL : (int64_t)n;
}

/* The symbols the loader looks at (syms of them): what would run a resolver of the module's,
 * or NULL. Their bytes, their versions' and the strings go into s. */
static const char *syms_check(const struct view *v, const struct dyn *d, uint64_t syms,
			      struct spans *s)
{
	const uint8_t *p;

	if (d->has[DT_STRTAB]) {
		if (!d->has[DT_STRSZ] || !at(v, d->val[DT_STRTAB], d->val[DT_STRSZ]))
			return "an unreadable string table";
		span_add(s, d->val[DT_STRTAB], d->val[DT_STRSZ]);
	}
	if (syms == 0)
		return NULL;
	if (syms > SYMS_MAX || !d->has[DT_SYMTAB] ||
	    (d->has[DT_SYMENT] && d->val[DT_SYMENT] != sizeof(Elf64_Sym)) ||
	    !(p = at(v, d->val[DT_SYMTAB], syms * sizeof(Elf64_Sym))))
		return "an unreadable symbol table";
	span_add(s, d->val[DT_SYMTAB], syms * sizeof(Elf64_Sym));
	if (d->has_versym) {
		if (!at(v, d->versym, syms * sizeof(Elf64_Half)))
			return "unreadable symbol versions";
		span_add(s, d->versym, syms * sizeof(Elf64_Half));
	}
	for (uint64_t i = 0; i < syms; i++) {
		Elf64_Sym y;

		memcpy(&y, p + i * sizeof(y), sizeof(y));
		if (ELF64_ST_TYPE(y.st_info) == STT_GNU_IFUNC && y.st_shndx != SHN_UNDEF)
			return "an IFUNC symbol";
	}
	return NULL;
}

/* What the dynamic array's relocations and symbols would run as the module loads or is
 * looked up (IFUNC resolvers of its own), or what of the loader's tables its relocations
 * would write. NULL when nothing. */
static const char *dyn_check(const struct view *v, const Elf64_Phdr *pd, const struct dyn *d)
{
	struct spans s = { 0 };
	struct rtab t[3];
	unsigned nt = rtabs_get(d, t);
	uint64_t syms = 0, relr_size;
	const uint8_t *relr;
	const char *what = NULL;
	int64_t found;

	span_add(&s, pd->p_vaddr, d->count * sizeof(Elf64_Dyn));
	for (unsigned i = 0; i < nt && !what; i++)
		what = relocs_check(v, &t[i], &s, &syms);
	if (!what)
		what = relr_check(v, d, &s, &relr, &relr_size);
	if (what)
		return what;
	found = syms_found(v, d, &s);
	if (found < 0)
		return "an unreadable hash table";
	what = syms_check(v, d, MAX(syms, (uint64_t)found), &s);
	if (what)
		return what;
	for (unsigned i = 0; i < nt; i++)
		if (relocs_write(v, &t[i], &s))
			return WRITES_TABLES;
	return relr && relr_write(relr, relr_size, &s) ? WRITES_TABLES : NULL;
}

/* Each DT_NEEDED a name the library path resolves (not a path of the module's choosing). */
static const char *needed_check(const struct view *v, const Elf64_Phdr *pd, const struct dyn *d)
{
	const uint8_t *strtab = NULL;

	for (unsigned i = 0;; i++) {
		const uint8_t *p =
			at(v, pd->p_vaddr + (uint64_t)i * sizeof(Elf64_Dyn), sizeof(Elf64_Dyn));
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
	    eh->e_phentsize != sizeof(Elf64_Phdr) || eh->e_phnum > PH_MAX ||
	    eh->e_phoff % _Alignof(Elf64_Phdr) ||
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
		what = dyn_check(&v, pd, &d);
	if (!what)
		what = needed_check(&v, pd, &d);
	if (!what)
		return 0;
	*ret_msg = wrk_strdup_printf("the module has %s: it would run code or load objects as it "
				     "is loaded or looked up, outside the sandbox of host kernels",
				     what);
	return -EINVAL;
}
