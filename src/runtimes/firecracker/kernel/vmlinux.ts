/**
 * Firecracker on x86_64 boots an uncompressed ELF kernel (vmlinux), not the compressed
 * bzImage (vmlinuz) distributions ship. This unpacks the guest image's vmlinuz once, as the
 * kernel's own scripts/extract-vmlinux does, and caches the result next to it.
 *
 * A bzImage is a real-mode setup, a small decompressor and the compressed kernel. Its boot
 * header says where the compressed part is (`payload_offset`, `payload_length` at 0x248,
 * relative to the protected-mode code that starts after the setup sectors), and the first
 * bytes of that part say how it was compressed. Debian's kernels use lz4; gzip, xz, zstd,
 * bzip2 and lzma are handled too. The ELF that comes out carries a PVH entry point, which is
 * also what lets QEMU's microvm boot the same file.
 */
import { spawn } from 'node:child_process';
import { open, readFile, rename, rm, stat, writeFile } from 'node:fs/promises';
import { gunzipSync } from 'node:zlib';

const ELF_MAGIC = Buffer.from([0x7f, 0x45, 0x4c, 0x46]);

/** Compressed-payload signatures, and the command (a Debian package's) that unpacks each. */
const FORMATS: { name: string; magic: Buffer; argv?: string[]; pkg?: string }[] = [
  { name: 'gzip', magic: Buffer.from([0x1f, 0x8b]) },
  { name: 'lz4', magic: Buffer.from([0x02, 0x21, 0x4c, 0x18]), argv: ['lz4', '-dc'], pkg: 'lz4' },
  { name: 'xz', magic: Buffer.from([0xfd, 0x37, 0x7a, 0x58, 0x5a, 0x00]), argv: ['xz', '-dc'], pkg: 'xz-utils' },
  { name: 'zstd', magic: Buffer.from([0x28, 0xb5, 0x2f, 0xfd]), argv: ['zstd', '-dc'], pkg: 'zstd' },
  { name: 'bzip2', magic: Buffer.from('BZh'), argv: ['bzip2', '-dc'], pkg: 'bzip2' },
  { name: 'lzma', magic: Buffer.from([0x5d, 0x00, 0x00]), argv: ['xz', '--format=lzma', '-dc'], pkg: 'xz-utils' },
];

/** Where the compressed kernel sits inside a bzImage. */
export function bzImagePayload(image: Buffer): Buffer {
  // "HdrS" at 0x202 marks a boot protocol header; payload fields exist from protocol 2.08.
  if (image.length < 0x250 || image.toString('latin1', 0x202, 0x206) !== 'HdrS') {
    throw new Error('not a bzImage (no "HdrS" boot header)');
  }
  const protocol = image.readUInt16LE(0x206);
  if (protocol < 0x208) throw new Error(`bzImage boot protocol ${protocol.toString(16)} is too old to locate its payload`);
  const setupSectors = image[0x1f1] || 4;
  const start = (setupSectors + 1) * 512 + image.readUInt32LE(0x248);
  const length = image.readUInt32LE(0x24c);
  if (start + length > image.length) throw new Error('bzImage payload runs past the end of the file');
  return image.subarray(start, start + length);
}

export async function isElf(file: string): Promise<boolean> {
  const handle = await open(file, 'r');
  try {
    const head = Buffer.alloc(4);
    await handle.read(head, 0, 4, 0);
    return head.equals(ELF_MAGIC);
  } finally {
    await handle.close();
  }
}

/**
 * Decompresses a bzImage's payload into `out` (an ELF vmlinux). The compressed part is piped
 * to the decompressor and its output goes straight to the file: a kernel is ~50 MB unpacked.
 */
export async function unpackBzImage(image: Buffer, out: string): Promise<void> {
  const payload = bzImagePayload(image);
  const format = FORMATS.find((f) => payload.subarray(0, f.magic.length).equals(f.magic));
  if (!format) throw new Error(`unknown kernel compression (payload starts with ${payload.subarray(0, 6).toString('hex')})`);
  if (!format.argv) {
    await writeFile(out, gunzipSync(payload), { mode: 0o644 });
  } else {
    const { argv, pkg } = format;
    const handle = await open(out, 'w', 0o644);
    try {
      const failure = await new Promise<string | undefined>((resolve) => {
        const child = spawn(argv[0] as string, argv.slice(1), { stdio: ['pipe', handle.fd, 'pipe'] });
        let stderr = '';
        child.stderr?.on('data', (chunk: Buffer) => (stderr += chunk.toString('utf8')));
        child.on('error', (err) => resolve(`unpacking a ${format.name} kernel needs \`${argv[0]}\` (apt-get install ${pkg}): ${err.message}`));
        // Like extract-vmlinux, judge by the output: some decompressors complain about the
        // padding after the payload yet have written the whole kernel.
        child.on('close', (code) => resolve(code === 0 ? undefined : `${argv.join(' ')} exited with ${code}: ${stderr.trim()}`));
        child.stdin?.on('error', () => undefined);
        child.stdin?.end(payload);
      });
      if (failure && !(await isElf(out))) throw new Error(failure);
    } finally {
      await handle.close();
    }
  }
  if (!(await isElf(out))) throw new Error(`the ${format.name} payload did not unpack to an ELF kernel`);
}

/**
 * The vmlinux to boot for `kernel`: the file itself if it already is an ELF, else the
 * unpacked copy at `cachePath`, made now if missing (written to a temporary name and
 * renamed, so a crash never leaves half a kernel to boot).
 */
export function ensureVmlinux(kernel: string, cachePath: string): Promise<string> {
  // One unpacking per file at a time in this process: concurrent first boots share it.
  let unpacking = inProgress.get(cachePath);
  if (!unpacking) {
    unpacking = unpackOnce(kernel, cachePath).finally(() => inProgress.delete(cachePath));
    inProgress.set(cachePath, unpacking);
  }
  return unpacking;
}

const inProgress = new Map<string, Promise<string>>();

async function unpackOnce(kernel: string, cachePath: string): Promise<string> {
  if (await isElf(kernel)) return kernel;
  const cached = await stat(cachePath).catch(() => undefined);
  if (cached?.isFile() && (await isElf(cachePath))) return cachePath;
  const temp = `${cachePath}.${process.pid}.tmp`;
  try {
    await unpackBzImage(await readFile(kernel), temp);
    await rename(temp, cachePath);
  } finally {
    await rm(temp, { force: true });
  }
  return cachePath;
}
