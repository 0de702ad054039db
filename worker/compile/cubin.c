/* SPDX-License-Identifier: MIT */
/* worker/compile/cubin.c: checking a client's cubin or fatbin, and listing the kernels of a module's code. */
#include <elf.h>
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <gpux/gpux.h>

#include "cubin.h"
#include "macro.h"
#include "wrk.h"

/*
 * NVIDIA's formats as the toolkit writes them (checked against NVRTC's and nvcc's output of
 * CUDA 13.0; the layouts agree with LLVM's EF_CUDA_* definitions and public descriptions of
 * fatbins):
 * - a cubin's architecture is in e_flags: its low byte up to ELF ABI version 7, bits 8-15
 *   from version 8 (Blackwell's toolkits) on; kernels are function symbols marked 0x10 in
 *   st_other;
 * - a fatbin is a 16-byte header (magic, version 1, header size, size of what follows) and
 *   entries, each a header of at least 64 bytes (kind: 1 PTX, 2 ELF; its own size; the
 *   payload's size; the architecture at byte 28; flags at byte 40, bits 0x2000/0x8000 when
 *   compressed) followed by its payload. nvcc compresses entries by default
 *   (--compress-mode), PTX first.
 */

#define CUDA_ABI_V2 8
#define STO_CUDA_ENTRY 0x10
#define FATBIN_MAGIC 0xba55ed50u
#define FATBIN_ENTRY_MIN 64u
#define FATBIN_ENTRY_MAX 4096u
#define FATBIN_ENTRIES_MAX 4096u
#define FATBIN_PTX 1u
#define FATBIN_ELF 2u
#define FATBIN_COMPRESSED 0xa000u

struct fat_header {
	uint32_t magic;
	uint16_t version;
	uint16_t header_size;
	uint64_t fat_size;
};

struct fat_entry {
	uint16_t kind;
	uint16_t version;
	uint32_t header_size;
	uint64_t size;
	uint32_t compressed_size;
	uint32_t unknown;
	uint16_t minor;
	uint16_t major;
	uint32_t arch;
	uint32_t name_offset;
	uint32_t name_len;
	uint64_t flags;
};
_Static_assert(sizeof(struct fat_entry) <= FATBIN_ENTRY_MIN, "fatbin entry");

/* A refusal: its message in *ret_msg, and -EINVAL. */
#define FAIL(ret_msg, ...) (*(ret_msg) = wrk_strdup_printf(__VA_ARGS__), -EINVAL)

/* The SM number (major * 10 + minor) a cubin was made for. */
static unsigned elf_sm(const Elf64_Ehdr *h)
{
	if (h->e_ident[EI_ABIVERSION] >= CUDA_ABI_V2)
		return (h->e_flags >> 8) & 0xff;
	return h->e_flags & 0xff;
}

/* A cubin for sm runs on a device of compute capability cc. */
static bool sm_runs_on(unsigned sm, unsigned cc)
{
	return sm / 10 == cc / 10 && sm % 10 <= cc % 10;
}

static bool elf_is(const uint8_t *p, size_t len)
{
	return len >= SELFMAG && memcmp(p, ELFMAG, SELFMAG) == 0;
}

static void shdr(const uint8_t *p, const Elf64_Ehdr *h, unsigned i, Elf64_Shdr *ret)
{
	memcpy(ret, p + h->e_shoff + (uint64_t)i * sizeof(*ret), sizeof(*ret));
}

/* The structure of an ELF image: every header and what it points at inside len bytes. */
static int elf_check(const uint8_t *p, size_t len, Elf64_Ehdr *ret, char **ret_msg)
{
	Elf64_Ehdr h;
	Elf64_Shdr strtab;

	if (len < sizeof(h) || !elf_is(p, len))
		return FAIL(ret_msg, "not an ELF file");
	memcpy(&h, p, sizeof(h));
	if (h.e_ident[EI_CLASS] != ELFCLASS64 || h.e_ident[EI_DATA] != ELFDATA2LSB ||
	    h.e_ident[EI_VERSION] != EV_CURRENT)
		return FAIL(ret_msg, "not a 64-bit little-endian ELF file");
	if (h.e_machine != EM_CUDA)
		return FAIL(ret_msg, "an ELF file for machine %u, not CUDA (%u)", h.e_machine,
			    EM_CUDA);
	if (h.e_type != ET_EXEC)
		return FAIL(ret_msg, "an ELF file of type %u, not a loadable cubin", h.e_type);
	if (h.e_ehsize != sizeof(h) || h.e_shentsize != sizeof(Elf64_Shdr) ||
	    (h.e_phnum && h.e_phentsize != sizeof(Elf64_Phdr)))
		return FAIL(ret_msg, "ELF header sizes are wrong");
	if (!range_ok(h.e_phoff, (uint64_t)h.e_phnum * sizeof(Elf64_Phdr), len) || h.e_shnum == 0 ||
	    !range_ok(h.e_shoff, (uint64_t)h.e_shnum * sizeof(Elf64_Shdr), len) ||
	    h.e_shstrndx >= h.e_shnum)
		return FAIL(ret_msg, "ELF program or section headers lie outside the file");
	for (unsigned i = 0; i < h.e_phnum; i++) {
		Elf64_Phdr ph;

		memcpy(&ph, p + h.e_phoff + (uint64_t)i * sizeof(ph), sizeof(ph));
		if (!range_ok(ph.p_offset, ph.p_filesz, len))
			return FAIL(ret_msg, "ELF segment %u lies outside the file", i);
	}
	for (unsigned i = 0; i < h.e_shnum; i++) {
		Elf64_Shdr s;

		shdr(p, &h, i, &s);
		if (s.sh_type != SHT_NOBITS && !range_ok(s.sh_offset, s.sh_size, len))
			return FAIL(ret_msg, "ELF section %u lies outside the file", i);
		if (s.sh_type == SHT_STRTAB && s.sh_size && p[s.sh_offset + s.sh_size - 1] != '\0')
			return FAIL(ret_msg, "ELF string table %u is not terminated", i);
		if (s.sh_type == SHT_SYMTAB) {
			Elf64_Shdr l;

			if (s.sh_entsize != sizeof(Elf64_Sym) || s.sh_size % sizeof(Elf64_Sym) ||
			    s.sh_link >= h.e_shnum)
				return FAIL(ret_msg, "ELF symbol table %u is malformed", i);
			shdr(p, &h, s.sh_link, &l);
			if (l.sh_type != SHT_STRTAB)
				return FAIL(ret_msg, "ELF symbol table %u has no string table", i);
		}
	}
	shdr(p, &h, h.e_shstrndx, &strtab);
	if (strtab.sh_type != SHT_STRTAB)
		return FAIL(ret_msg, "ELF section names have no string table");
	for (unsigned i = 0; i < h.e_shnum; i++) {
		Elf64_Shdr s;

		shdr(p, &h, i, &s);
		if (s.sh_name >= MAX(strtab.sh_size, 1))
			return FAIL(ret_msg, "ELF section %u has no name", i);
	}
	*ret = h;
	return 0;
}

static int fat_entry_get(const uint8_t *p, size_t end, uint64_t off, struct fat_entry *ret,
			 char **ret_msg)
{
	struct fat_entry e;

	if (!range_ok(off, FATBIN_ENTRY_MIN, end))
		return FAIL(ret_msg, "fatbin: entry at %llu is cut short", (unsigned long long)off);
	memcpy(&e, p + off, sizeof(e));
	if (e.header_size < FATBIN_ENTRY_MIN || e.header_size > FATBIN_ENTRY_MAX ||
	    !range_ok(off + e.header_size, e.size, end))
		return FAIL(ret_msg, "fatbin: entry at %llu lies outside the fatbin",
			    (unsigned long long)off);
	*ret = e;
	return 0;
}

/* Append "sm_XY cubin" or "compute_XY PTX" to a list of what a fatbin holds. */
static void have_add(char *have, size_t cap, const struct fat_entry *e)
{
	size_t n = strlen(have);

	if (n + 32 < cap)
		(void)snprintf(have + n, cap - n, "%s%s_%u %s", n ? ", " : "",
			       e->kind == FATBIN_ELF ? "sm" : "compute", e->arch,
			       e->kind == FATBIN_ELF ? "cubin" : "PTX");
}

/* Whether the device (compute capability cc) can run entry e: a cubin of its major version at
 * its minor or below, or PTX for it or an older one. */
static bool fat_runs_on(const struct fat_entry *e, unsigned cc)
{
	return (e->kind == FATBIN_ELF && sm_runs_on(e->arch, cc)) ||
	       (e->kind == FATBIN_PTX && e->arch <= cc);
}

/*
 * Compressed entries are not checked (NVIDIA's compression is not a documented format), and
 * the driver decompresses and parses whichever entry it picks. It picks a cubin made for the
 * device itself; without one (its default fallback, CU_PREFER_PTX) it compiles PTX, else it
 * takes a compatible cubin. So a fatbin is refused when anything the device could run is
 * compressed, unless an uncompressed cubin for exactly this device is there to be taken.
 */
static int fat_compressed_check(bool exact_plain, bool exact_compressed,
				const struct fat_entry *compressed, unsigned cc, char **ret_msg)
{
	if (!compressed || (exact_plain && !exact_compressed))
		return 0;
	return FAIL(ret_msg,
		    "fatbin: its %s_%u %s, which a device of sm_%u may run, is compressed; "
		    "compressed code is not checked here: build the fatbin with "
		    "nvcc --compress-mode=none (or --no-compress)",
		    compressed->kind == FATBIN_ELF ? "sm" : "compute", compressed->arch,
		    compressed->kind == FATBIN_ELF ? "cubin" : "PTX", cc);
}

static int fatbin_check(const uint8_t *p, size_t len, unsigned cc, char **ret_msg)
{
	struct fat_header h;
	struct fat_entry compressed;
	uint64_t off, end;
	unsigned n = 0;
	bool usable = false, any_compressed = false, exact_plain = false, exact_compressed = false;
	char have[256] = "";

	if (len < sizeof(h))
		return FAIL(ret_msg, "fatbin: cut short");
	memcpy(&h, p, sizeof(h));
	if (h.version != 1 || h.header_size < sizeof(h) ||
	    !range_ok(h.header_size, h.fat_size, len))
		return FAIL(ret_msg,
			    "fatbin: its header is wrong (version %u, sizes %u + %llu of %zu)",
			    h.version, h.header_size, (unsigned long long)h.fat_size, len);
	end = h.header_size + h.fat_size;
	for (off = h.header_size; off < end; n++) {
		struct fat_entry e;
		int r = fat_entry_get(p, end, off, &e, ret_msg);

		if (r < 0)
			return r;
		if (n == FATBIN_ENTRIES_MAX)
			return FAIL(ret_msg, "fatbin: more than %u entries", FATBIN_ENTRIES_MAX);
		if (e.kind == FATBIN_ELF && !(e.flags & FATBIN_COMPRESSED)) {
			Elf64_Ehdr eh;
			char *why = NULL;

			r = elf_check(p + off + e.header_size, e.size, &eh, &why);
			if (r < 0) {
				(void)FAIL(ret_msg, "fatbin: sm_%u cubin: %s", e.arch,
					   why ? why : "bad");
				free(why);
				return r;
			}
			if (elf_sm(&eh) != e.arch)
				return FAIL(ret_msg, "fatbin: an entry says sm_%u, its cubin sm_%u",
					    e.arch, elf_sm(&eh));
		}
		if (e.kind == FATBIN_ELF || e.kind == FATBIN_PTX)
			have_add(have, sizeof(have), &e);
		if (fat_runs_on(&e, cc)) {
			usable = true;
			if ((e.flags & FATBIN_COMPRESSED) && !any_compressed) {
				compressed = e;
				any_compressed = true;
			}
		}
		if (e.kind == FATBIN_ELF && e.arch == cc) {
			exact_plain |= !(e.flags & FATBIN_COMPRESSED);
			exact_compressed |= (e.flags & FATBIN_COMPRESSED) != 0;
		}
		off += e.header_size + e.size;
	}
	if (!usable)
		return FAIL(ret_msg, "fatbin: no code for sm_%u (it has: %s)", cc,
			    *have ? have : "nothing");
	return fat_compressed_check(exact_plain, exact_compressed,
				    any_compressed ? &compressed : NULL, cc, ret_msg);
}

int wrk_cubin_check(const uint8_t *p, size_t len, unsigned cc, char **ret_msg)
{
	struct fat_header fh;
	Elf64_Ehdr h;
	char *why = NULL;
	int r;

	if (len >= sizeof(fh)) {
		memcpy(&fh, p, sizeof(fh));
		if (fh.magic == FATBIN_MAGIC)
			return fatbin_check(p, len, cc, ret_msg);
	}
	if (!elf_is(p, len))
		return FAIL(ret_msg, "not a cubin (an ELF file) nor a fatbin");
	r = elf_check(p, len, &h, &why);
	if (r < 0) {
		(void)FAIL(ret_msg, "cubin: %s", why ? why : "malformed");
		free(why);
		return r;
	}
	if (!sm_runs_on(elf_sm(&h), cc))
		return FAIL(ret_msg,
			    "cubin: made for sm_%u, which does not run on this device (sm_%u): "
			    "a cubin runs on its own major version, at its minor or later",
			    elf_sm(&h), cc);
	return 0;
}

/* ---- the kernels of a module's code ---- */

static int elf_entries(const uint8_t *p, size_t len, wrk_entry_fn *fn, void *userdata)
{
	Elf64_Ehdr h;
	char *why = NULL;

	/* Whatever it came from, nothing is read outside what the checks allow. */
	if (elf_check(p, len, &h, &why) < 0) {
		free(why);
		return -ENOENT;
	}
	for (unsigned i = 0; i < h.e_shnum; i++) {
		Elf64_Shdr s, str;

		shdr(p, &h, i, &s);
		if (s.sh_type != SHT_SYMTAB)
			continue;
		shdr(p, &h, s.sh_link, &str);
		for (uint64_t k = 0; k < s.sh_size / sizeof(Elf64_Sym); k++) {
			Elf64_Sym sym;
			int r;

			memcpy(&sym, p + s.sh_offset + k * sizeof(sym), sizeof(sym));
			if (ELF64_ST_TYPE(sym.st_info) != STT_FUNC ||
			    !(sym.st_other & STO_CUDA_ENTRY) || sym.st_name == 0 ||
			    sym.st_name >= str.sh_size || p[str.sh_offset + sym.st_name] == '\0')
				continue;
			r = fn((const char *)p + str.sh_offset + sym.st_name, userdata);
			if (r < 0)
				return r;
		}
	}
	return 0;
}

static int ptx_entries(const char *ptx, wrk_entry_fn *fn, void *userdata)
{
	char name[1024];

	for (const char *q = ptx; (q = strstr(q, ".entry")); q += 6) {
		const char *s = q + 6;
		size_t n = 0;
		int r;

		if (s[0] != ' ' && s[0] != '\t')
			continue;
		s += strspn(s, " \t");
		while (n < sizeof(name) - 1 &&
		       (s[n] == '_' || s[n] == '$' || s[n] == '%' || (s[n] >= '0' && s[n] <= '9') ||
			(s[n] >= 'a' && s[n] <= 'z') || (s[n] >= 'A' && s[n] <= 'Z')))
			n++;
		if (n == 0 || n == sizeof(name) - 1)
			continue;
		memcpy(name, s, n);
		name[n] = '\0';
		r = fn(name, userdata);
		if (r < 0)
			return r;
	}
	return 0;
}

int wrk_code_entries(const uint8_t *p, size_t len, wrk_entry_fn *fn, void *userdata)
{
	struct fat_header fh;

	if (elf_is(p, len))
		return elf_entries(p, len, fn, userdata);
	if (len >= sizeof(fh)) {
		memcpy(&fh, p, sizeof(fh));
		if (fh.magic == FATBIN_MAGIC) {
			uint64_t end = fh.header_size + fh.fat_size;

			if (fh.header_size < sizeof(fh) ||
			    !range_ok(fh.header_size, fh.fat_size, len))
				return -ENOENT;
			for (uint64_t off = fh.header_size; off < end;) {
				struct fat_entry e;
				char *why = NULL;

				if (fat_entry_get(p, end, off, &e, &why) < 0) {
					free(why);
					break;
				}
				if (e.kind == FATBIN_ELF && !(e.flags & FATBIN_COMPRESSED))
					return elf_entries(p + off + e.header_size, e.size, fn,
							   userdata);
				off += e.header_size + e.size;
			}
			return -ENOENT;
		}
	}
	if (!memchr(p, '\0', len))
		return -ENOENT;
	return ptx_entries((const char *)p, fn, userdata);
}
