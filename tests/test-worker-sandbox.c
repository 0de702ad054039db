/* SPDX-License-Identifier: MIT */
/* tests/test-worker-sandbox.c: the host sandbox's check of a module image, against images that lie. */
#include <elf.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "helpers.h"
#include "macro.h"
#include "sandbox.h"

/*
 * The loader runs what the dynamic segment (PT_DYNAMIC, found through the program headers)
 * names, whatever the section table says. Each image here is a shared object of one PT_LOAD
 * that maps the whole file, a PT_DYNAMIC, and a section table whose only dynamic section is
 * a decoy: a clean dynamic array elsewhere in the file.
 */

#define PHDRS 3u
#define DYN_AT 512u   /* the dynamic array the loader reads */
#define DECOY_AT 768u /* the one the section table shows */
#define SHDR_AT 1024u
#define IMAGE_LEN (SHDR_AT + 2 * sizeof(Elf64_Shdr))

struct image {
	uint8_t b[IMAGE_LEN];
	Elf64_Phdr ph[PHDRS];
	unsigned nph;
};

static void put_dyn(struct image *im, size_t at, const Elf64_Dyn *d, unsigned n)
{
	memcpy(im->b + at, d, n * sizeof(*d));
}

/* An image whose PT_DYNAMIC holds tags (then DT_NULL); its program headers are written by
 * finish(), so that a test may change them first. */
static void image_make(struct image *im, const Elf64_Dyn *tags, unsigned n)
{
	Elf64_Ehdr h = {
		.e_type = ET_DYN,
		.e_machine = EM_X86_64,
		.e_version = EV_CURRENT,
		.e_phoff = sizeof(Elf64_Ehdr),
		.e_shoff = SHDR_AT,
		.e_ehsize = sizeof(Elf64_Ehdr),
		.e_phentsize = sizeof(Elf64_Phdr),
		.e_phnum = 2,
		.e_shentsize = sizeof(Elf64_Shdr),
		.e_shnum = 2,
	};
	Elf64_Shdr sh[2] = {
		{ 0 },
		{ .sh_type = SHT_DYNAMIC,
		  .sh_offset = DECOY_AT,
		  .sh_size = 2 * sizeof(Elf64_Dyn),
		  .sh_entsize = sizeof(Elf64_Dyn),
		  .sh_flags = SHF_ALLOC | SHF_WRITE },
	};
	const Elf64_Dyn clean[] = { { .d_tag = DT_STRSZ, .d_un.d_val = 1 }, { .d_tag = DT_NULL } };

	memset(im, 0, sizeof(*im));
	memcpy(h.e_ident, ELFMAG, SELFMAG);
	h.e_ident[EI_CLASS] = ELFCLASS64;
	h.e_ident[EI_DATA] = ELFDATA2LSB;
	h.e_ident[EI_VERSION] = EV_CURRENT;
	memcpy(im->b, &h, sizeof(h));
	memcpy(im->b + SHDR_AT, sh, sizeof(sh));
	put_dyn(im, DECOY_AT, clean, 2);
	put_dyn(im, DYN_AT, tags, n);
	im->ph[0] = (Elf64_Phdr){ .p_type = PT_LOAD,
				  .p_flags = PF_R | PF_W,
				  .p_filesz = IMAGE_LEN,
				  .p_memsz = IMAGE_LEN,
				  .p_align = 4096 };
	im->ph[1] = (Elf64_Phdr){ .p_type = PT_DYNAMIC,
				  .p_flags = PF_R | PF_W,
				  .p_offset = DYN_AT,
				  .p_vaddr = DYN_AT,
				  .p_filesz = (n + 1) * sizeof(Elf64_Dyn),
				  .p_memsz = (n + 1) * sizeof(Elf64_Dyn),
				  .p_align = 8 };
	im->nph = 2;
}

/* Write the program headers and check the image: its status, the message in ret_msg. */
static int check(struct image *im, char **ret_msg)
{
	uint16_t n = (uint16_t)im->nph;

	memcpy(im->b + sizeof(Elf64_Ehdr), im->ph, n * sizeof(Elf64_Phdr));
	memcpy(im->b + offsetof(Elf64_Ehdr, e_phnum), &n, sizeof(n));
	*ret_msg = NULL;
	return wrk_sandbox_image_check(im->b, sizeof(im->b), ret_msg);
}

static void assert_refused(struct image *im, const char *why)
{
	char *msg = NULL;

	assert_int_equal(check(im, &msg), -EINVAL);
	assert_non_null(msg);
	if (!strstr(msg, why))
		fail_msg("\"%s\" says nothing of \"%s\"", msg, why);
	free(msg);
}

/* The check's verdict on im: refused with a message that names why, or taken (why NULL). */
static void assert_verdict(struct image *im, const char *why)
{
	char *msg = NULL;

	if (why) {
		assert_refused(im, why);
		return;
	}
	assert_int_equal(check(im, &msg), 0);
	assert_null(msg);
}

static void test_sandbox_image_clean_is_taken(void **state)
{
	const Elf64_Dyn tags[] = { { .d_tag = DT_STRSZ, .d_un.d_val = 1 } };
	struct image im;

	image_make(&im, tags, 1);
	assert_verdict(&im, NULL);
}

/* Every tag that makes the loader run code, behind a section table that shows none. */
static void test_sandbox_image_dynamic_segment_read(void **state)
{
	static const struct {
		int64_t tag;
		const char *name;
	} bad[] = {
		{ DT_INIT, "DT_INIT" },
		{ DT_FINI, "DT_FINI" },
		{ DT_INIT_ARRAY, "DT_INIT_ARRAY" },
		{ DT_FINI_ARRAY, "DT_FINI_ARRAY" },
		{ DT_PREINIT_ARRAY, "DT_PREINIT_ARRAY" },
		{ DT_INIT_ARRAYSZ, "DT_INIT_ARRAYSZ" },
		{ DT_FINI_ARRAYSZ, "DT_FINI_ARRAYSZ" },
		{ DT_PREINIT_ARRAYSZ, "DT_PREINIT_ARRAYSZ" },
	};

	for (unsigned i = 0; i < ARRAY_SIZE(bad); i++) {
		const Elf64_Dyn tags[] = { { .d_tag = DT_STRSZ, .d_un.d_val = 1 },
					   { .d_tag = bad[i].tag, .d_un.d_ptr = 0x40 } };
		struct image im;

		image_make(&im, tags, 2);
		assert_refused(&im, bad[i].name);
	}
}

/* The loader reads the dynamic segment where it is mapped (p_vaddr), not at its p_offset. */
static void test_sandbox_image_dynamic_read_where_mapped(void **state)
{
	const Elf64_Dyn tags[] = { { .d_tag = DT_INIT_ARRAY, .d_un.d_ptr = 0x40 } };
	struct image im;

	image_make(&im, tags, 1);
	im.ph[1].p_offset = DECOY_AT;
	assert_refused(&im, "DT_INIT_ARRAY");
	/* Mapped from elsewhere in the file: a second PT_LOAD puts the decoy's bytes there. */
	image_make(&im, tags, 1);
	im.ph[0].p_filesz = im.ph[0].p_memsz = DYN_AT;
	im.ph[1].p_offset = DECOY_AT;
	im.ph[1].p_vaddr = 0x10000 + DYN_AT;
	im.ph[2] = (Elf64_Phdr){ .p_type = PT_LOAD,
				 .p_flags = PF_R | PF_W,
				 .p_vaddr = 0x10000,
				 .p_filesz = 4096,
				 .p_memsz = 4096,
				 .p_align = 4096 };
	im.nph = 3;
	assert_refused(&im, "DT_INIT_ARRAY");
}

/* A dynamic segment that cannot be read whole is not vouched for. */
static void test_sandbox_image_dynamic_unreadable(void **state)
{
	const Elf64_Dyn tags[] = { { .d_tag = DT_STRSZ, .d_un.d_val = 1 } };
	struct image im;

	/* Nowhere in the file's mapped bytes. */
	image_make(&im, tags, 1);
	im.ph[1].p_vaddr = 1 << 20;
	assert_refused(&im, "dynamic segment");
	/* Mapped over by another segment, page by page as the loader maps. */
	image_make(&im, tags, 1);
	im.ph[2] = (Elf64_Phdr){ .p_type = PT_LOAD,
				 .p_flags = PF_R,
				 .p_vaddr = DYN_AT + 2048,
				 .p_offset = DYN_AT + 2048,
				 .p_filesz = 8,
				 .p_memsz = 8,
				 .p_align = 4096 };
	im.nph = 3;
	assert_refused(&im, "dynamic segment");
	/* No DT_NULL before the mapped bytes end. */
	image_make(&im, tags, 1);
	im.ph[0].p_filesz = im.ph[0].p_memsz = DYN_AT + sizeof(Elf64_Dyn);
	assert_refused(&im, "dynamic segment");
	/* Two of them, or none. */
	image_make(&im, tags, 1);
	im.ph[2] = im.ph[1];
	im.nph = 3;
	assert_refused(&im, "dynamic segment");
	image_make(&im, tags, 1);
	im.nph = 1;
	assert_refused(&im, "dynamic segment");
}

#if defined(__x86_64__)
#define R_IRELATIVE R_X86_64_IRELATIVE
#elif defined(__aarch64__)
#define R_IRELATIVE R_AARCH64_IRELATIVE
#endif

/* Tables the dynamic array points at go here, between the decoy and the section headers. */
#define TABLES_AT 896u

/* A resolver the loader would run: an IRELATIVE relocation, or a relocation of an IFUNC. */
static void test_sandbox_image_ifunc_relocation(void **state)
{
	const Elf64_Dyn tags[] = { { .d_tag = DT_RELA, .d_un.d_ptr = TABLES_AT },
				   { .d_tag = DT_RELASZ, .d_un.d_val = sizeof(Elf64_Rela) },
				   { .d_tag = DT_RELAENT, .d_un.d_val = sizeof(Elf64_Rela) },
				   { .d_tag = DT_SYMTAB, .d_un.d_ptr = TABLES_AT + 64 },
				   { .d_tag = DT_SYMENT, .d_un.d_val = sizeof(Elf64_Sym) } };
	Elf64_Rela rl = { .r_offset = 0x40, .r_info = ELF64_R_INFO(0, R_IRELATIVE) };
	Elf64_Sym sym = { .st_info = ELF64_ST_INFO(STB_GLOBAL, STT_GNU_IFUNC), .st_shndx = 1 };
	struct image im;

	image_make(&im, tags, ARRAY_SIZE(tags));
	memcpy(im.b + TABLES_AT, &rl, sizeof(rl));
	assert_refused(&im, "IFUNC relocation");
	/* Symbol 1, an IFUNC of the module's own. */
	rl.r_info = ELF64_R_INFO(1, R_X86_64_GLOB_DAT);
	image_make(&im, tags, ARRAY_SIZE(tags));
	memcpy(im.b + TABLES_AT, &rl, sizeof(rl));
	memcpy(im.b + TABLES_AT + 64 + sizeof(sym), &sym, sizeof(sym));
	assert_refused(&im, "IFUNC symbol");
}

/* dlsym() runs an IFUNC's resolver: every symbol the hash table lets it find is looked at. */
static void test_sandbox_image_ifunc_symbol_found_by_hash(void **state)
{
	const Elf64_Dyn tags[] = { { .d_tag = DT_SYMTAB, .d_un.d_ptr = TABLES_AT },
				   { .d_tag = DT_SYMENT, .d_un.d_val = sizeof(Elf64_Sym) },
				   { .d_tag = DT_GNU_HASH, .d_un.d_ptr = TABLES_AT + 64 } };
	/* One bucket, symbol 1 first hashed, one bloom word; bucket 0: symbol 1; its chain
	 * ends there. */
	const uint32_t hash[] = { 1, 1, 1, 0, 0, 0, 1, 1 };
	const unsigned types[] = { STT_FUNC, STT_GNU_IFUNC };
	struct image im;

	for (unsigned i = 0; i < ARRAY_SIZE(types); i++) {
		Elf64_Sym sym = { .st_info = ELF64_ST_INFO(STB_GLOBAL, types[i]), .st_shndx = 1 };

		image_make(&im, tags, ARRAY_SIZE(tags));
		memcpy(im.b + TABLES_AT + sizeof(sym), &sym, sizeof(sym));
		memcpy(im.b + TABLES_AT + 64, hash, sizeof(hash));
		assert_verdict(&im, types[i] == STT_GNU_IFUNC ? "IFUNC symbol" : NULL);
	}
}

/*
 * The loader reads its tables (relocations, symbols, the dynamic array) from the mapped
 * module while it relocates it, and an earlier relocation may write them: here relocation 0
 * (R_X86_64_64 of an absolute symbol, a value of the image's choosing) turns relocation 1
 * into an IRELATIVE, whose resolver glibc runs at dlopen(). The image as read has neither an
 * IFUNC relocation nor an IFUNC symbol.
 */
static void test_sandbox_image_relocation_rewrites_relocations(void **state)
{
	const Elf64_Dyn tags[] = { { .d_tag = DT_RELA, .d_un.d_ptr = TABLES_AT },
				   { .d_tag = DT_RELASZ, .d_un.d_val = 2 * sizeof(Elf64_Rela) },
				   { .d_tag = DT_RELAENT, .d_un.d_val = sizeof(Elf64_Rela) },
				   { .d_tag = DT_SYMTAB, .d_un.d_ptr = TABLES_AT + 64 },
				   { .d_tag = DT_SYMENT, .d_un.d_val = sizeof(Elf64_Sym) } };
	const Elf64_Rela rl[2] = {
		{ .r_offset = TABLES_AT + sizeof(Elf64_Rela) + offsetof(Elf64_Rela, r_info),
		  .r_info = ELF64_R_INFO(1, R_X86_64_64) },
		{ .r_offset = 0x40, .r_info = ELF64_R_INFO(0, R_X86_64_NONE), .r_addend = 0x100 },
	};
	const Elf64_Sym sym = { .st_info = ELF64_ST_INFO(STB_LOCAL, STT_NOTYPE),
				.st_shndx = SHN_ABS,
				.st_value = ELF64_R_INFO(0, R_IRELATIVE) };
	struct image im;

	image_make(&im, tags, ARRAY_SIZE(tags));
	memcpy(im.b + TABLES_AT, rl, sizeof(rl));
	memcpy(im.b + TABLES_AT + 64 + sizeof(sym), &sym, sizeof(sym));
	assert_refused(&im, "relocation");
}

/* Symbols of the images below: free bytes between the program headers and the dynamic array. */
#define SYMS_AT 256u

/* An absolute symbol: a relocation of it writes st_value + r_addend, a value of the image's
 * choosing, wherever the module is loaded. */
#define ABS_SYM(v)                                                                                 \
	{                                                                                          \
		.st_info = ELF64_ST_INFO(STB_LOCAL, STT_NOTYPE), .st_shndx = SHN_ABS,              \
		.st_value = (v)                                                                    \
	}

/*
 * An image with relocations rl at TABLES_AT, naming symbols 1.. (sym) of the table at
 * SYMS_AT (DT_SYMTAB is the first tag, so its d_ptr is at DYN_AT + 8), then the tags more.
 */
static void image_relocs(struct image *im, const Elf64_Rela *rl, unsigned nrl, const Elf64_Sym *sym,
			 unsigned nsym, const Elf64_Dyn *more, unsigned nmore)
{
	Elf64_Dyn tags[8] = { { .d_tag = DT_SYMTAB, .d_un.d_ptr = SYMS_AT },
			      { .d_tag = DT_SYMENT, .d_un.d_val = sizeof(Elf64_Sym) },
			      { .d_tag = DT_RELA, .d_un.d_ptr = TABLES_AT },
			      { .d_tag = DT_RELASZ, .d_un.d_val = nrl * sizeof(Elf64_Rela) },
			      { .d_tag = DT_RELAENT, .d_un.d_val = sizeof(Elf64_Rela) } };

	assert_true(nmore <= 3 && (nsym + 1) * sizeof(Elf64_Sym) <= DYN_AT - SYMS_AT &&
		    nrl * sizeof(Elf64_Rela) <= SHDR_AT - TABLES_AT);
	/* (memcpy() of nothing from NULL is still undefined.) */
	if (nmore)
		memcpy(tags + 5, more, nmore * sizeof(*more));
	image_make(im, tags, 5 + nmore);
	if (nrl)
		memcpy(im->b + TABLES_AT, rl, nrl * sizeof(*rl));
	if (nsym)
		memcpy(im->b + SYMS_AT + sizeof(Elf64_Sym), sym, nsym * sizeof(*sym));
}

/* Relocation 0 makes symbol 2, which the hash table lets dlsym() find, an IFUNC of the
 * module's (st_name, st_info, st_other and st_shndx are its first 8 bytes). */
static void test_sandbox_image_relocation_rewrites_symbols(void **state)
{
	const uint64_t ifunc =
		(uint64_t)ELF64_ST_INFO(STB_GLOBAL, STT_GNU_IFUNC) << 32 | (uint64_t)1 << 48;
	const Elf64_Rela rl = { .r_offset = SYMS_AT + 2 * sizeof(Elf64_Sym),
				.r_info = ELF64_R_INFO(1, R_X86_64_64) };
	const Elf64_Sym sym[2] = {
		ABS_SYM(ifunc), { .st_info = ELF64_ST_INFO(STB_GLOBAL, STT_FUNC), .st_shndx = 1 }
	};
	const Elf64_Dyn more[] = { { .d_tag = DT_GNU_HASH, .d_un.d_ptr = TABLES_AT + 64 } };
	/* One bucket from symbol 1, one bloom word; bucket 0: symbol 1; its chain ends at 2. */
	const uint32_t hash[] = { 1, 1, 1, 0, 0, 0, 1, 0, 1 };
	struct image im;

	image_relocs(&im, &rl, 1, sym, 2, more, 1);
	memcpy(im.b + TABLES_AT + 64, hash, sizeof(hash));
	assert_refused(&im, "relocation that writes");
}

/* Relocation 0 points DT_SYMTAB at another table, where symbol 2 (of relocation 1) is an
 * IFUNC of the module's: the loader reads DT_SYMTAB's entry each time it looks a symbol up. */
static void test_sandbox_image_relocation_rewrites_dynamic(void **state)
{
	const uint64_t other = SYMS_AT + 4 * sizeof(Elf64_Sym);
	const Elf64_Rela rl[2] = {
		{ .r_offset = DYN_AT + offsetof(Elf64_Dyn, d_un),
		  .r_info = ELF64_R_INFO(1, R_X86_64_64) },
		{ .r_offset = 0x40, .r_info = ELF64_R_INFO(2, R_X86_64_GLOB_DAT) },
	};
	const Elf64_Sym sym[2] = {
		ABS_SYM(other), { .st_info = ELF64_ST_INFO(STB_GLOBAL, STT_FUNC), .st_shndx = 1 }
	};
	const Elf64_Sym ifunc = { .st_info = ELF64_ST_INFO(STB_GLOBAL, STT_GNU_IFUNC),
				  .st_shndx = 1 };
	struct image im;

	image_relocs(&im, rl, 2, sym, 2, NULL, 0);
	memcpy(im.b + other + 2 * sizeof(Elf64_Sym), &ifunc, sizeof(ifunc));
	assert_refused(&im, "relocation that writes");
}

/*
 * Every byte a relocation may write, against every table the loader reads as it relocates:
 * one word (even a relocation that writes none: the first DT_RELACOUNT are taken for
 * RELATIVEs), two for a TLS descriptor; a copy relocation's length is its symbol's.
 */
static void test_sandbox_image_relocation_writes(void **state)
{
	static const struct {
		uint64_t at;
		uint32_t type;
		const char *says; /* NULL: taken */
	} cases[] = {
		{ DYN_AT - 8, R_X86_64_RELATIVE, NULL },
		{ DYN_AT - 7, R_X86_64_RELATIVE, "relocation that writes" },
		{ DYN_AT - 7, R_X86_64_NONE, "relocation that writes" },
		{ DYN_AT - 16, R_X86_64_TLSDESC, NULL },
		{ DYN_AT - 15, R_X86_64_TLSDESC, "relocation that writes" },
		/* The last entry of the dynamic array, DT_NULL (tags: 5, and 2 more). */
		{ DYN_AT + 7 * sizeof(Elf64_Dyn), R_X86_64_64, "relocation that writes" },
		{ DYN_AT + 8 * sizeof(Elf64_Dyn), R_X86_64_64, NULL },
		{ TABLES_AT - 8, R_X86_64_GLOB_DAT, NULL },
		{ TABLES_AT + sizeof(Elf64_Rela) - 1, R_X86_64_JUMP_SLOT,
		  "relocation that writes" },
		{ SYMS_AT + 2 * sizeof(Elf64_Sym) - 1, R_X86_64_DTPMOD64,
		  "relocation that writes" },
		{ SYMS_AT + 2 * sizeof(Elf64_Sym), R_X86_64_DTPMOD64, NULL },
		{ TABLES_AT + 64 + 4, R_X86_64_TPOFF64, "relocation that writes" },
		{ 0x40, R_X86_64_COPY, "copy relocation" },
	};

	for (unsigned i = 0; i < ARRAY_SIZE(cases); i++) {
		const Elf64_Rela rl = { .r_offset = cases[i].at,
					.r_info = ELF64_R_INFO(1, cases[i].type) };
		const Elf64_Sym sym = { .st_info = ELF64_ST_INFO(STB_GLOBAL, STT_FUNC),
					.st_shndx = 1 };
		/* A string table of 8 bytes at TABLES_AT + 64. */
		const Elf64_Dyn more[] = { { .d_tag = DT_STRTAB, .d_un.d_ptr = TABLES_AT + 64 },
					   { .d_tag = DT_STRSZ, .d_un.d_val = 8 } };
		struct image im;

		image_relocs(&im, &rl, 1, &sym, 1, more, ARRAY_SIZE(more));
		assert_verdict(&im, cases[i].says);
	}
}

/* The hash tables and symbol versions the loader reads as it looks symbols up, to their last
 * byte: a relocation of that byte is refused, of the next taken. */
static void test_sandbox_image_relocation_writes_lookup_tables(void **state)
{
	/* GNU: one bucket from symbol 1, one bloom word, bucket 0: symbol 1, chain to 2. SysV:
	 * one bucket, two chain entries. Versions: one half-word for each of symbols 0-2. */
	static const uint32_t gnu[] = { 1, 1, 1, 0, 0, 0, 1, 0, 1 };
	static const uint32_t sysv[] = { 1, 3, 1, 0, 0, 0 };
	static const uint16_t versym[] = { 0, 1, 1 };
	static const struct {
		int64_t tag;
		const void *table;
		size_t size;
	} tables[] = {
		{ DT_GNU_HASH, gnu, sizeof(gnu) },
		{ DT_HASH, sysv, sizeof(sysv) },
		{ DT_VERSYM, versym, sizeof(versym) },
	};
	const Elf64_Sym sym[2] = {
		{ .st_info = ELF64_ST_INFO(STB_GLOBAL, STT_FUNC), .st_shndx = 1 },
		{ .st_info = ELF64_ST_INFO(STB_GLOBAL, STT_FUNC), .st_shndx = 1 },
	};

	for (unsigned i = 0; i < ARRAY_SIZE(tables); i++) {
		const Elf64_Dyn more[] = { { .d_tag = tables[i].tag,
					     .d_un.d_ptr = TABLES_AT + 64 } };
		/* Symbol 2 for the versions: the hash tables name it. */
		const uint64_t sym_of = tables[i].tag == DT_VERSYM ? 2 : 1;

		for (unsigned past = 0; past < 2; past++) {
			const Elf64_Rela rl = { .r_offset =
							TABLES_AT + 64 + tables[i].size - 1 + past,
						.r_info = ELF64_R_INFO(sym_of, R_X86_64_GLOB_DAT) };
			struct image im;

			image_relocs(&im, &rl, 1, sym, 2, more, 1);
			memcpy(im.b + TABLES_AT + 64, tables[i].table, tables[i].size);
			assert_verdict(&im, !past ? "relocation that writes" : NULL);
		}
	}
}

/*
 * Packed RELATIVEs (DT_RELR) are relocations too: an address (even) is a word the loader
 * adds its base to; a bitmap (odd), 63 words after it (bit b: word b - 1). A bitmap before
 * any address would be words from address 0.
 */
static void test_sandbox_image_relr_writes(void **state)
{
	static const struct {
		uint64_t relr[2];
		const char *says; /* NULL: taken */
	} cases[] = {
		{ { 0x40, 1 | 1 << 3 }, NULL },
		{ { DYN_AT, 1 }, "relocation that writes" },
		/* Word 2 after 0x200 - 8 * 3. */
		{ { DYN_AT - 8 * 3, 1 | 1 << 3 }, "relocation that writes" },
		{ { DYN_AT - 8 * 3, 1 | 1 << 2 }, NULL },
		{ { 1 | 1 << 1, 0x40 }, "relocation that writes" },
	};

	for (unsigned i = 0; i < ARRAY_SIZE(cases); i++) {
		const Elf64_Dyn more[] = { { .d_tag = DT_RELR, .d_un.d_ptr = TABLES_AT + 64 },
					   { .d_tag = DT_RELRSZ, .d_un.d_val = 16 },
					   { .d_tag = DT_RELRENT, .d_un.d_val = 8 } };
		struct image im;

		image_relocs(&im, NULL, 0, NULL, 0, more, ARRAY_SIZE(more));
		memcpy(im.b + TABLES_AT + 64, cases[i].relr, sizeof(cases[i].relr));
		assert_verdict(&im, cases[i].says);
	}
	/* The table itself. */
	{
		const Elf64_Dyn more[] = { { .d_tag = DT_RELR, .d_un.d_ptr = TABLES_AT + 64 },
					   { .d_tag = DT_RELRSZ, .d_un.d_val = 8 } };
		const uint64_t self = TABLES_AT + 64;
		struct image im;

		image_relocs(&im, NULL, 0, NULL, 0, more, ARRAY_SIZE(more));
		memcpy(im.b + TABLES_AT + 64, &self, sizeof(self));
		assert_refused(&im, "relocation that writes");
	}
}

/* Text relocations: the loader makes read-only segments writable while it relocates. */
static void test_sandbox_image_text_relocations(void **state)
{
	static const struct {
		int64_t tag;
		uint64_t val;
		const char *says; /* NULL: taken */
	} cases[] = {
		{ DT_TEXTREL, 0, "DT_TEXTREL" },
		{ DT_FLAGS, DF_TEXTREL | DF_BIND_NOW, "DF_TEXTREL" },
		{ DT_FLAGS, DF_BIND_NOW, NULL },
	};

	for (unsigned i = 0; i < ARRAY_SIZE(cases); i++) {
		const Elf64_Dyn tags[] = { { .d_tag = DT_STRSZ, .d_un.d_val = 1 },
					   { .d_tag = cases[i].tag, .d_un.d_val = cases[i].val } };
		struct image im;

		image_make(&im, tags, ARRAY_SIZE(tags));
		assert_verdict(&im, cases[i].says);
	}
}

/* Objects loaded with the module run their constructors: none from a path of its choosing. */
static void test_sandbox_image_other_objects(void **state)
{
	static const char strings[] = "\0libm.so.6\0/tmp/evil.so";
	static const struct {
		int64_t tag;
		uint64_t val;
		const char *says; /* NULL: taken */
	} cases[] = {
		{ DT_NEEDED, 1, NULL },
		{ DT_NEEDED, 11, "DT_NEEDED path" },
		{ DT_NEEDED, sizeof(strings), "DT_NEEDED that cannot be read" },
		{ DT_RPATH, 1, "DT_RPATH" },
		{ DT_RUNPATH, 1, "DT_RUNPATH" },
		{ DT_AUDIT, 1, "DT_AUDIT" },
		{ DT_FILTER, 1, "DT_FILTER" },
	};

	for (unsigned i = 0; i < ARRAY_SIZE(cases); i++) {
		const Elf64_Dyn tags[] = { { .d_tag = DT_STRTAB, .d_un.d_ptr = TABLES_AT },
					   { .d_tag = DT_STRSZ, .d_un.d_val = sizeof(strings) },
					   { .d_tag = cases[i].tag, .d_un.d_val = cases[i].val } };
		struct image im;

		image_make(&im, tags, ARRAY_SIZE(tags));
		memcpy(im.b + TABLES_AT, strings, sizeof(strings));
		assert_verdict(&im, cases[i].says);
	}
}

/* An executable stack would be every thread's once the module is loaded. */
static void test_sandbox_image_executable_stack(void **state)
{
	const Elf64_Dyn tags[] = { { .d_tag = DT_STRSZ, .d_un.d_val = 1 } };
	struct image im;

	image_make(&im, tags, 1);
	im.ph[2] = (Elf64_Phdr){ .p_type = PT_GNU_STACK, .p_flags = PF_R | PF_W | PF_X };
	im.nph = 3;
	assert_refused(&im, "executable stack");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_sandbox_image_clean_is_taken),
		cmocka_unit_test(test_sandbox_image_dynamic_segment_read),
		cmocka_unit_test(test_sandbox_image_dynamic_read_where_mapped),
		cmocka_unit_test(test_sandbox_image_dynamic_unreadable),
		cmocka_unit_test(test_sandbox_image_ifunc_relocation),
		cmocka_unit_test(test_sandbox_image_ifunc_symbol_found_by_hash),
		cmocka_unit_test(test_sandbox_image_relocation_rewrites_relocations),
		cmocka_unit_test(test_sandbox_image_relocation_rewrites_symbols),
		cmocka_unit_test(test_sandbox_image_relocation_rewrites_dynamic),
		cmocka_unit_test(test_sandbox_image_relocation_writes),
		cmocka_unit_test(test_sandbox_image_relocation_writes_lookup_tables),
		cmocka_unit_test(test_sandbox_image_relr_writes),
		cmocka_unit_test(test_sandbox_image_text_relocations),
		cmocka_unit_test(test_sandbox_image_other_objects),
		cmocka_unit_test(test_sandbox_image_executable_stack),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
