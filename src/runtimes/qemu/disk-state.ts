/**
 * The files of a QEMU VM paused to disk, in its session dir (root's, 0700; never a path a
 * client names), and how they are written so that a crash leaves the old state or the new one:
 *
 * - `vm-state.gz`: the VM's migration stream (its RAM, CPU and device state), gzip'd. Written
 *   as `vm-state.gz.partial`, fsync'd, then renamed, so a whole file under the final name is
 *   the only one anything trusts; removed by the resume before the VM runs again.
 * - `qemu-resume.json`: what a resume needs to start the same VM again (its argv, netns,
 *   cgroup limits), written at start; a restart reads it back (adoption of a paused VM).
 */
import { createReadStream, createWriteStream } from 'node:fs';
import { readFile, rm, stat, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { Transform, type Readable, type Writable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { createGunzip } from 'node:zlib';
import type { ConsoleLogLimits } from '../console-log.js';
import { fsyncPath, PARTIAL_SUFFIX, writeDurably } from '../../host/fsync.js';
import type { VmLimits } from '../vm/cgroups.js';
import { ParallelGzip } from './parallel-gzip.js';

const STATE_FILE = 'vm-state.gz';
const RECIPE_FILE = 'qemu-resume.json';
/** A recipe is a command line and a few names: anything bigger is not one of ours. */
const MAX_RECIPE_BYTES = 64 * 1024;
/** The state is compressed in blocks of 1 MiB, two at a time (libuv's pool has four threads). */
const GZIP_BLOCK_BYTES = 2 ** 20;
const GZIP_THREADS = 2;

export function stateFileOf(sessionDir: string): string {
  return path.join(sessionDir, STATE_FILE);
}

/** What a resume needs to start the same VM again (the session's own, written by the runtime at start). */
export interface ResumeRecipe {
  netns: string;
  /** QEMU's arguments as the VM was started (without the binary). */
  argv: string[];
  limits: VmLimits;
  logsDir: string;
  consoleLog: ConsoleLogLimits;
  /** The writable volumes' files, opened again for QEMU's descriptors 5, 6, ... (drives.ts). */
  volumeFiles: string[];
}

export async function writeRecipe(sessionDir: string, recipe: ResumeRecipe): Promise<void> {
  await writeFile(path.join(sessionDir, RECIPE_FILE), JSON.stringify(recipe), { mode: 0o600 });
}

export async function readRecipe(sessionDir: string): Promise<ResumeRecipe> {
  const file = path.join(sessionDir, RECIPE_FILE);
  const info = await stat(file);
  if (info.size > MAX_RECIPE_BYTES) throw new Error(`${file} is ${info.size} bytes: not a resume recipe`);
  const parsed = JSON.parse(await readFile(file, 'utf8')) as Partial<ResumeRecipe>;
  const { argv, volumeFiles = [] } = parsed;
  const strings = (list: unknown): list is string[] => Array.isArray(list) && list.every((a) => typeof a === 'string');
  if (!strings(argv) || !strings(volumeFiles) || typeof parsed.netns !== 'string' || !parsed.limits || !parsed.consoleLog) {
    throw new Error(`${file} is not a resume recipe`);
  }
  return { netns: parsed.netns, argv, limits: parsed.limits, logsDir: String(parsed.logsDir ?? ''), consoleLog: parsed.consoleLog, volumeFiles };
}

/** The uid and gid of `-runas uid:gid` in a recipe's argv (the VM's own user). */
export function runAsOf(argv: readonly string[]): { uid: number; gid: number } | undefined {
  const at = argv.indexOf('-runas');
  const match = at >= 0 ? /^(\d+):(\d+)$/.exec(argv[at + 1] ?? '') : null;
  return match ? { uid: Number(match[1]), gid: Number(match[2]) } : undefined;
}

/** The guest memory of a recipe's argv (`-m <n>M`), MiB. */
export function memoryMiBOf(argv: readonly string[]): number {
  const at = argv.indexOf('-m');
  const match = at >= 0 ? /^(\d+)M$/.exec(argv[at + 1] ?? '') : null;
  return match ? Number(match[1]) : 0;
}

/** The saved state, if a whole one is there: its size and when it was written. */
export async function savedState(sessionDir: string): Promise<{ bytes: number; since: string } | undefined> {
  const info = await stat(stateFileOf(sessionDir)).catch(() => undefined);
  return info?.isFile() ? { bytes: info.size, since: info.mtime.toISOString() } : undefined;
}

/** A state file that was being written when its writer died, or a whole one that is no longer the truth. */
export async function removeState(sessionDir: string, whole: boolean): Promise<void> {
  const file = stateFileOf(sessionDir);
  await rm(`${file}${PARTIAL_SUFFIX}`, { force: true });
  if (whole) {
    await rm(file, { force: true });
    await fsyncPath(sessionDir);
  }
}

/** Passes at most `max` bytes on; more is an error (the stream comes from a process the guest drives). */
export function byteCap(max: number, what: string): Transform & { seen(): number } {
  let seen = 0;
  const cap = new Transform({
    transform(chunk: Buffer, _encoding, done) {
      seen += chunk.length;
      if (seen > max) return done(new Error(`${what} is over ${max} bytes`));
      done(null, chunk);
    },
  });
  return Object.assign(cap, { seen: () => seen });
}

/**
 * Writes `source` (the migration stream, capped at `maxBytes`) compressed into the state file:
 * to the `.partial` name first, fsync'd, renamed, the directory fsync'd. Any failure (the
 * disk full: ENOSPC) removes the partial file and is thrown: no half-written state is ever
 * under the final name. Returns the state file's size.
 */
export async function saveState(source: Readable, sessionDir: string, maxBytes: number): Promise<{ bytes: number; raw: number }> {
  const file = stateFileOf(sessionDir);
  const cap = byteCap(maxBytes, 'the VM state stream');
  // Level 1: most of a guest's RAM is zero pages (sent as flags) or text and code that
  // compress well at the cheapest level; the pause waits for the compression, so blocks of
  // it run on two threads at once (200 MB of a desktop's state: 2.5-3.4 s on one, 1 s
  // without compressing; written uncompressed, the disk was as slow as the one thread).
  const gzip = new ParallelGzip({ blockBytes: GZIP_BLOCK_BYTES, parallel: GZIP_THREADS, zlib: { level: 1, memLevel: 9 } });
  await writeDurably(file, (partial) => pipeline(source, cap, gzip, createWriteStream(partial, { mode: 0o600, highWaterMark: GZIP_BLOCK_BYTES })));
  return { bytes: (await stat(file)).size, raw: cap.seen() };
}

/** Feeds the saved state, uncompressed, into `sink` (the new VM's incoming stream), capped at `maxBytes`. */
export async function loadState(sessionDir: string, sink: Writable, maxBytes: number): Promise<void> {
  // Big chunks: each is a round trip to the thread pool (16 KiB ones made 12,000 for a desktop).
  const chunk = GZIP_BLOCK_BYTES;
  await pipeline(
    createReadStream(stateFileOf(sessionDir), { highWaterMark: chunk }),
    createGunzip({ chunkSize: chunk }),
    byteCap(maxBytes, 'the saved VM state'),
    sink,
  );
}
