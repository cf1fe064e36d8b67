// npz.ts — reads the members of a NumPy .npz archive (a ZIP of .npy files, as np.savez writes it) in
// place: the central directory is parsed (ZIP64 included — NumPy writes every member with ZIP64 extra
// fields, and the multi-TB MLPerf archives need them), and each stored member becomes an NpyFile read by
// row ranges at its offset. Compressed members (np.savez_compressed) are refused: they cannot be read
// by range.
import { EmbshardError } from '../errors.js';
import { NpyFile, openRead } from './npy.js';

type FileHandle = Awaited<ReturnType<typeof openRead>>;

const EOCD = 0x06054b50, ZIP64_LOCATOR = 0x07064b50, ZIP64_EOCD = 0x06064b50, CENTRAL = 0x02014b50, LOCAL = 0x04034b50;

async function readAt(fh: FileHandle, pos: number, len: number): Promise<Buffer> {
  const b = Buffer.alloc(len);
  let done = 0;
  while (done < len) {
    const { bytesRead } = await fh.read(b, done, len - done, pos + done);
    if (bytesRead === 0) break;
    done += bytesRead;
  }
  return b.subarray(0, done);
}

interface Member {
  name: string;
  method: number;
  size: number;
  localOffset: number;
}

/** An open .npz archive; `array(name)` gives a member as an NpyFile sharing the archive's handle. */
export class NpzFile {
  private constructor(
    readonly path: string,
    private readonly fh: FileHandle,
    private readonly members: Map<string, Member>,
  ) {}

  static async open(path: string): Promise<NpzFile> {
    const fh = await openRead(path);
    try {
      return new NpzFile(path, fh, await NpzFile.directory(fh, path));
    } catch (e) {
      await fh.close();
      throw e;
    }
  }

  private static async directory(fh: FileHandle, path: string): Promise<Map<string, Member>> {
    const bad = (why: string): EmbshardError => new EmbshardError('INVALID_ARGUMENT', `${path}: not a usable .npz archive (${why})`);
    const size = (await fh.stat()).size;
    const tailLen = Math.min(size, 65535 + 22);
    const tail = await readAt(fh, size - tailLen, tailLen);
    let e = -1;
    for (let i = tail.length - 22; i >= 0; i--)
      if (tail.readUInt32LE(i) === EOCD) {
        e = i;
        break;
      }
    if (e < 0) throw bad('no end-of-central-directory record');
    let count = tail.readUInt16LE(e + 10);
    let cdSize = tail.readUInt32LE(e + 12);
    let cdOffset = tail.readUInt32LE(e + 16);
    const hasLocator = e >= 20 && tail.readUInt32LE(e - 20) === ZIP64_LOCATOR;
    if (!hasLocator && (count === 0xffff || cdSize === 0xffffffff || cdOffset === 0xffffffff)) throw bad('ZIP64 locator missing');
    if (hasLocator) {
      const z = await readAt(fh, Number(tail.readBigUInt64LE(e - 20 + 8)), 56);
      if (z.length < 56 || z.readUInt32LE(0) !== ZIP64_EOCD) throw bad('ZIP64 end record missing');
      count = Number(z.readBigUInt64LE(32));
      cdSize = Number(z.readBigUInt64LE(40));
      cdOffset = Number(z.readBigUInt64LE(48));
    }
    if (!Number.isSafeInteger(cdOffset) || !Number.isSafeInteger(cdSize) || cdOffset + cdSize > size) throw bad('the central directory lies outside the file');
    const cd = await readAt(fh, cdOffset, cdSize);
    if (cd.length < cdSize) throw bad('truncated central directory');
    const members = new Map<string, Member>();
    let p = 0;
    for (let k = 0; k < count; k++) {
      if (p + 46 > cd.length || cd.readUInt32LE(p) !== CENTRAL) throw bad(`central directory entry ${k} is corrupt`);
      const method = cd.readUInt16LE(p + 10);
      let comp = cd.readUInt32LE(p + 20), raw = cd.readUInt32LE(p + 24), local = cd.readUInt32LE(p + 42);
      const nameLen = cd.readUInt16LE(p + 28), extraLen = cd.readUInt16LE(p + 30), commentLen = cd.readUInt16LE(p + 32);
      if (p + 46 + nameLen + extraLen + commentLen > cd.length) throw bad(`central directory entry ${k} is corrupt`);
      const name = cd.toString('utf8', p + 46, p + 46 + nameLen);
      let x = p + 46 + nameLen;
      const xe = x + extraLen;
      while (x + 4 <= xe) {
        const id = cd.readUInt16LE(x), len = cd.readUInt16LE(x + 2);
        if (x + 4 + len > xe) throw bad(`an extra field of central directory entry ${k} is corrupt`);
        if (id === 0x0001) {
          // the ZIP64 values, in this order, of the fields that hold 0xffffffff
          let q = x + 4;
          const next = (): number => {
            if (q + 8 > x + 4 + len) throw bad(`the ZIP64 field of central directory entry ${k} is too short`);
            const v = Number(cd.readBigUInt64LE(q));
            q += 8;
            return v;
          };
          if (raw === 0xffffffff) raw = next();
          if (comp === 0xffffffff) comp = next();
          if (local === 0xffffffff) local = next();
        }
        x += 4 + len;
      }
      if (!Number.isSafeInteger(raw) || !Number.isSafeInteger(local) || local + 30 > size) throw bad(`central directory entry ${k} points outside the file`);
      members.set(name.endsWith('.npy') ? name.slice(0, -4) : name, { name, method, size: raw, localOffset: local });
      p += 46 + nameLen + extraLen + commentLen;
    }
    return members;
  }

  /** Member names without the .npy suffix, in archive order. */
  get names(): string[] {
    return [...this.members.keys()];
  }

  /** Member `name` (without .npy) as an NpyFile; closing it leaves the archive open. */
  async array(name: string): Promise<NpyFile> {
    const m = this.members.get(name);
    if (!m) throw new EmbshardError('INVALID_ARGUMENT', `${this.path}: no array '${name}' (has ${this.names.join(', ')})`);
    if (m.method !== 0) throw new EmbshardError('INVALID_ARGUMENT', `${this.path}: array '${name}' is compressed; only np.savez (stored) archives can be read by range`);
    const h = await readAt(this.fh, m.localOffset, 30);
    if (h.length < 30 || h.readUInt32LE(0) !== LOCAL) throw new EmbshardError('INVALID_ARGUMENT', `${this.path}: local header of '${m.name}' is corrupt`);
    const base = m.localOffset + 30 + h.readUInt16LE(26) + h.readUInt16LE(28);
    return NpyFile.at(this.fh, base, m.size, `${this.path}:${m.name}`);
  }

  async close(): Promise<void> {
    await this.fh.close();
  }
}
