/* SPDX-License-Identifier: MIT */
/* tests/fuzz/gen-corpus-cubin.c: write fuzz-cubin's seed inputs: small cubins and fatbins, and broken ones. */
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/*
 * Usage: gen-corpus-cubin DIR. The cubins are made here, section by section, as the toolkit
 * lays them out (header, section names, strings, symbols with kernels marked 0x10, code),
 * so that the corpus holds no compiler's output; the broken ones each break one thing.
 */

#define SM_ABI8(sm) (((sm) << 8) | 0x4)

static const char *dir;

static void save(const char *name, const void *p, size_t len)
{
	char path[4096];
	int fd;

	(void)snprintf(path, sizeof(path), "%s/%s", dir, name);
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0 || write(fd, p, len) != (ssize_t)len) {
		fprintf(stderr, "gen-corpus-cubin: %s: %s\n", path, strerror(errno));
		exit(1);
	}
	(void)close(fd);
}

struct cubin {
	uint8_t b[4096];
	size_t len;
};

static const char shstr[] = "\0.shstrtab\0.strtab\0.symtab\0.text._Z4kernPf\0.text.plain\0";
static const char str[] = "\0_Z4kernPf\0plain\0helper\0";

/* A cubin for sm (ELF ABI abi) with kernels _Z4kernPf and plain, and a device function. */
static void cubin_make(struct cubin *c, unsigned sm, unsigned abi)
{
	Elf64_Ehdr h = { 0 };
	Elf64_Shdr sh[6] = { { 0 } };
	Elf64_Sym sym[4] = { { 0 } };
	size_t off = sizeof(h);

	memset(c, 0, sizeof(*c));
	memcpy(h.e_ident, ELFMAG, SELFMAG);
	h.e_ident[EI_CLASS] = ELFCLASS64;
	h.e_ident[EI_DATA] = ELFDATA2LSB;
	h.e_ident[EI_VERSION] = EV_CURRENT;
	h.e_ident[EI_OSABI] = 0x41;
	h.e_ident[EI_ABIVERSION] = (unsigned char)abi;
	h.e_type = ET_EXEC;
	h.e_machine = EM_CUDA;
	h.e_version = EV_CURRENT;
	h.e_flags = abi >= 8 ? SM_ABI8(sm) : sm | 0x500;
	h.e_ehsize = sizeof(h);
	h.e_shentsize = sizeof(Elf64_Shdr);
	h.e_shnum = 6;
	h.e_shstrndx = 1;

	sh[1] = (Elf64_Shdr){
		.sh_name = 1, .sh_type = SHT_STRTAB, .sh_offset = off, .sh_size = sizeof(shstr)
	};
	memcpy(c->b + off, shstr, sizeof(shstr));
	off += sizeof(shstr);
	sh[2] = (Elf64_Shdr){
		.sh_name = 11, .sh_type = SHT_STRTAB, .sh_offset = off, .sh_size = sizeof(str)
	};
	memcpy(c->b + off, str, sizeof(str));
	off = (off + sizeof(str) + 7) & ~7ul;
	sym[1] = (Elf64_Sym){ .st_name = 1,
			      .st_info = ELF64_ST_INFO(STB_GLOBAL, STT_FUNC),
			      .st_other = 0x10,
			      .st_shndx = 4,
			      .st_size = 128 };
	sym[2] = (Elf64_Sym){ .st_name = 11,
			      .st_info = ELF64_ST_INFO(STB_GLOBAL, STT_FUNC),
			      .st_other = 0x10,
			      .st_shndx = 5,
			      .st_size = 128 };
	sym[3] = (Elf64_Sym){ .st_name = 17,
			      .st_info = ELF64_ST_INFO(STB_LOCAL, STT_FUNC),
			      .st_shndx = 5 };
	sh[3] = (Elf64_Shdr){ .sh_name = 19,
			      .sh_type = SHT_SYMTAB,
			      .sh_offset = off,
			      .sh_size = sizeof(sym),
			      .sh_link = 2,
			      .sh_info = 1,
			      .sh_entsize = sizeof(Elf64_Sym) };
	memcpy(c->b + off, sym, sizeof(sym));
	off += sizeof(sym);
	off = (off + 127) & ~127ul;
	sh[4] = (Elf64_Shdr){ .sh_name = 27,
			      .sh_type = SHT_PROGBITS,
			      .sh_offset = off,
			      .sh_size = 128,
			      .sh_flags = SHF_ALLOC | SHF_EXECINSTR };
	sh[5] = (Elf64_Shdr){ .sh_name = 43,
			      .sh_type = SHT_PROGBITS,
			      .sh_offset = off + 128,
			      .sh_size = 128,
			      .sh_flags = SHF_ALLOC | SHF_EXECINSTR };
	off += 256;
	h.e_shoff = off;
	memcpy(c->b + off, sh, sizeof(sh));
	off += sizeof(sh);
	memcpy(c->b, &h, sizeof(h));
	c->len = off;
}

/* A fatbin of entries (kind, arch, payload, compressed), as nvcc -fatbin lays them out. */
struct entry {
	uint16_t kind;
	uint32_t arch;
	const void *p;
	size_t len;
	bool compressed;
};

static size_t fatbin_make(uint8_t *out, const struct entry *e, unsigned n)
{
	uint32_t magic = 0xba55ed50u;
	uint16_t version = 1, head = 16;
	uint64_t off = 16, fat;

	memset(out, 0, 16);
	for (unsigned i = 0; i < n; i++) {
		uint32_t hsize = 64;
		uint16_t ever = 0x101;
		uint64_t size = (e[i].len + 7) & ~7ul, flags = e[i].compressed ? 0x8011 : 0x11;

		memset(out + off, 0, 64 + size);
		memcpy(out + off, &e[i].kind, 2);
		memcpy(out + off + 2, &ever, 2);
		memcpy(out + off + 4, &hsize, 4);
		memcpy(out + off + 8, &size, 8);
		memcpy(out + off + 28, &e[i].arch, 4);
		memcpy(out + off + 40, &flags, 8);
		memcpy(out + off + 64, e[i].p, e[i].len);
		off += 64 + size;
	}
	fat = off - 16;
	memcpy(out, &magic, 4);
	memcpy(out + 4, &version, 2);
	memcpy(out + 6, &head, 2);
	memcpy(out + 8, &fat, 8);
	return off;
}

/* Save c with `len` bytes at `at` replaced by `bytes`. */
static void save_patch(const char *name, const struct cubin *c, size_t at, const void *bytes,
		       size_t len)
{
	struct cubin d = *c;

	memcpy(d.b + at, bytes, len);
	save(name, d.b, d.len);
}

int main(int argc, char **argv)
{
	static const char ptx[] = ".version 8.0\n.target sm_90\n.address_size 64\n"
				  ".visible .entry _Z4kernPf(.param .u64 p)\n{\n\tret;\n}\n";
	static uint8_t fb[16384];
	struct cubin c90, c86, c80;
	Elf64_Ehdr h;
	size_t n, shdr;
	uint64_t u64;
	uint32_t u32;
	uint16_t u16;

	if (argc != 2) {
		fprintf(stderr, "usage: %s DIR\n", argv[0]);
		return 2;
	}
	dir = argv[1];
	cubin_make(&c90, 90, 8);
	cubin_make(&c86, 86, 7);
	cubin_make(&c80, 80, 8);
	memcpy(&h, c90.b, sizeof(h));
	shdr = h.e_shoff;

	save("cubin-sm90", c90.b, c90.len);
	save("cubin-sm86-abi7", c86.b, c86.len);
	save("cubin-sm80", c80.b, c80.len);
	save("ptx", ptx, sizeof(ptx));
	n = fatbin_make(fb,
			(struct entry[]){ { 2, 80, c80.b, c80.len, false },
					  { 2, 90, c90.b, c90.len, false },
					  { 1, 90, ptx, sizeof(ptx), false } },
			3);
	save("fatbin-sm80-sm90-ptx", fb, n);
	n = fatbin_make(fb,
			(struct entry[]){ { 2, 90, "(compressed)", 12, true },
					  { 1, 70, "(compressed)", 12, true } },
			2);
	save("fatbin-compressed", fb, n);
	/* nvcc's default: the cubin as it is, its PTX compressed. */
	n = fatbin_make(fb,
			(struct entry[]){ { 2, 90, c90.b, c90.len, false },
					  { 1, 90, "(compressed)", 12, true } },
			2);
	save("fatbin-sm90-compressed-ptx", fb, n);
	n = fatbin_make(fb,
			(struct entry[]){ { 2, 80, c80.b, c80.len, false },
					  { 2, 86, "(compressed)", 12, true } },
			2);
	save("fatbin-sm80-compressed-sm86", fb, n);
	n = fatbin_make(fb, (struct entry[]){ { 2, 80, c80.b, c80.len, false } }, 1);
	save("fatbin-sm80-only", fb, n);
	save("bad-fatbin-truncated", fb, n - 9);
	u64 = UINT64_MAX - 8;
	memcpy(fb + 16 + 8, &u64, 8);
	save("bad-fatbin-entry-size-wraps", fb, n);
	n = fatbin_make(fb, (struct entry[]){ { 2, 90, c80.b, c80.len, false } }, 1);
	save("bad-fatbin-arch-disagrees", fb, n);

	save("bad-cubin-truncated", c90.b, c90.len / 2);
	save("bad-cubin-header-only", c90.b, sizeof(h));
	save_patch("bad-cubin-class32", &c90, EI_CLASS, "\1", 1);
	u16 = EM_X86_64;
	save_patch("bad-cubin-machine", &c90, offsetof(Elf64_Ehdr, e_machine), &u16, 2);
	u16 = ET_REL;
	save_patch("bad-cubin-relocatable", &c90, offsetof(Elf64_Ehdr, e_type), &u16, 2);
	u64 = UINT64_MAX - 100;
	save_patch("bad-cubin-shoff-wraps", &c90, offsetof(Elf64_Ehdr, e_shoff), &u64, 8);
	u16 = 60000;
	save_patch("bad-cubin-shnum-huge", &c90, offsetof(Elf64_Ehdr, e_shnum), &u16, 2);
	u16 = 9;
	save_patch("bad-cubin-shstrndx", &c90, offsetof(Elf64_Ehdr, e_shstrndx), &u16, 2);
	u16 = 1;
	save_patch("bad-cubin-phnum", &c90, offsetof(Elf64_Ehdr, e_phnum), &u16, 2);
	u64 = 1ull << 40;
	save_patch("bad-cubin-section-offset", &c90,
		   shdr + 4 * sizeof(Elf64_Shdr) + offsetof(Elf64_Shdr, sh_offset), &u64, 8);
	u32 = 9;
	save_patch("bad-cubin-symtab-link", &c90,
		   shdr + 3 * sizeof(Elf64_Shdr) + offsetof(Elf64_Shdr, sh_link), &u32, 4);
	u64 = 23;
	save_patch("bad-cubin-symtab-entsize", &c90,
		   shdr + 3 * sizeof(Elf64_Shdr) + offsetof(Elf64_Shdr, sh_entsize), &u64, 8);
	/* The string table's last byte, its NUL, overwritten. */
	save_patch("bad-cubin-strtab-unterminated", &c90,
		   sizeof(h) + sizeof(shstr) + sizeof(str) - 1, "x", 1);
	/* The first kernel's name beyond the strings: no kernel, but nothing read either. */
	{
		Elf64_Shdr symtab;

		memcpy(&symtab, c90.b + shdr + 3 * sizeof(Elf64_Shdr), sizeof(symtab));
		u32 = 5000;
		save_patch("cubin-symbol-name-outside", &c90,
			   symtab.sh_offset + sizeof(Elf64_Sym) + offsetof(Elf64_Sym, st_name),
			   &u32, 4);
	}
	save_patch("bad-cubin-section-name", &c90,
		   shdr + 4 * sizeof(Elf64_Shdr) + offsetof(Elf64_Shdr, sh_name), &u32, 4);
	return 0;
}
