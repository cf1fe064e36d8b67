// elf.ts — a minimal ELF64 little-endian reader for the packaging tests, written from the ELF spec:
// the file class/machine, the section headers (name, type, size) and the names of the dynamic symbols
// that a shared object defines (what dlopen/N-API registration sees after `strip --strip-all`).
import { readFileSync } from 'node:fs';

export interface ElfSection {
  name: string;
  type: number;
  offset: number;
  size: number;
  link: number;
}

export interface ElfInfo {
  /** e_type: 3 = ET_DYN (shared object) */
  type: number;
  /** e_machine: 62 = EM_X86_64, 183 = EM_AARCH64 */
  machine: number;
  sections: ElfSection[];
  /** names of dynamic symbols with a definition (st_shndx != SHN_UNDEF) */
  definedDynamic: string[];
}

const SHT_DYNSYM = 11;

function cstr(buf: Buffer, at: number): string {
  const end = buf.indexOf(0, at);
  return buf.toString('latin1', at, end < 0 ? buf.length : end);
}

export function readElf(file: string): ElfInfo {
  const b = readFileSync(file);
  if (b.readUInt32BE(0) !== 0x7f454c46) throw new Error(`${file} is not an ELF file`);
  if (b[4] !== 2 || b[5] !== 1) throw new Error(`${file} is not ELF64 little-endian`);
  const type = b.readUInt16LE(0x10);
  const machine = b.readUInt16LE(0x12);
  const shoff = Number(b.readBigUInt64LE(0x28));
  const shentsize = b.readUInt16LE(0x3a);
  const shnum = b.readUInt16LE(0x3c);
  const shstrndx = b.readUInt16LE(0x3e);
  const raw = Array.from({ length: shnum }, (_, i) => {
    const h = shoff + i * shentsize;
    return {
      nameOff: b.readUInt32LE(h),
      type: b.readUInt32LE(h + 4),
      offset: Number(b.readBigUInt64LE(h + 24)),
      size: Number(b.readBigUInt64LE(h + 32)),
      link: b.readUInt32LE(h + 40),
    };
  });
  const names = raw[shstrndx]!.offset;
  const sections = raw.map((s) => ({ name: cstr(b, names + s.nameOff), type: s.type, offset: s.offset, size: s.size, link: s.link }));
  const definedDynamic: string[] = [];
  for (const s of sections) {
    if (s.type !== SHT_DYNSYM) continue;
    const strtab = sections[s.link]!.offset;
    for (let p = s.offset; p + 24 <= s.offset + s.size; p += 24) {
      const shndx = b.readUInt16LE(p + 6);
      if (shndx !== 0) definedDynamic.push(cstr(b, strtab + b.readUInt32LE(p)));
    }
  }
  return { type, machine, sections, definedDynamic };
}
