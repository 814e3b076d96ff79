import { createPrivateKey } from 'node:crypto';
import { createReadStream, existsSync } from 'node:fs';
import path from 'node:path';
import ssh2 from 'ssh2';
import { readdir, readFile, readlink, realpath, stat } from 'node:fs/promises';
import { mountsUnder } from '../../src/host/mounts.js';
import type { ResourceNames } from '../../src/network/names.js';
import { generateClientKey } from '../../src/transport/ssh-keys.js';
import { run } from '../../src/util/exec.js';

/** What the host holds for one session: every kind of resource a sandbox takes. */
export interface HostTrace {
  netns: boolean;
  veth: boolean;
  mounts: string[];
  container: boolean;
  processes: number[];
  sessionDir: boolean;
}

/**
 * `netnsNeverSeen`: the sandbox's netns came and went inside one request (a failed create), so
 * no inode could be remembered; the caller then checks processes another way (by command line).
 */
export async function hostTrace(names: ResourceNames, sessionId: string, sessionDir: string, options: { netnsNeverSeen?: boolean } = {}): Promise<HostTrace> {
  const name = names.netns(sessionId);
  const netns = (await run(['ip', 'netns', 'list'])).stdout.split('\n').some((l) => l.split(' ')[0] === name);
  const veth = (await run(['ip', 'link', 'show', name], { allowFailure: true })).exitCode === 0;
  const mounts = (await readFile('/proc/self/mountinfo', 'utf8')).split('\n').filter((l) => l.includes(sessionDir));
  const container = existsSync(`${names.runcRoot}/${names.container(sessionId)}`);
  return { netns, veth, mounts, container, processes: await processesInNetns(name, options.netnsNeverSeen === true), sessionDir: existsSync(sessionDir) };
}

/**
 * The inode of each sandbox netns seen while it still had its name. A destroy removes the name
 * first, but a process left behind keeps the namespace (and its inode) alive: only the inode
 * remembered from before tells which processes were the sandbox's.
 */
const rememberedInodes = new Map<string, number>();

/** Remembers the sandbox's netns inode: call while the sandbox lives, before it is destroyed. */
export async function rememberNetns(names: ResourceNames, sessionId: string): Promise<void> {
  const name = names.netns(sessionId);
  const inode = await namedNetnsInode(name);
  if (inode === undefined) throw new Error(`rememberNetns: the netns ${name} does not exist`);
  rememberedInodes.set(name, inode);
}

async function namedNetnsInode(name: string): Promise<number | undefined> {
  try {
    return (await stat(`/var/run/netns/${name}`)).ino;
  } catch {
    return undefined;
  }
}

/**
 * Host pids whose network namespace is the sandbox's, by the namespace's inode (read while
 * it is named, else the one remembered): a netns whose name is gone can still hold processes.
 */
async function processesInNetns(name: string, neverSeen: boolean): Promise<number[]> {
  const current = await namedNetnsInode(name);
  if (current !== undefined) rememberedInodes.set(name, current);
  const inode = current ?? rememberedInodes.get(name);
  if (inode === undefined) {
    if (neverSeen) return [];
    throw new Error(`hostTrace: the netns ${name} was never seen; call rememberNetns (or hostTrace) before the destroy, or processes cannot be checked`);
  }
  // Once the namespace is truly gone the kernel may give its inode number to a new one
  // (another sandbox's, named): then nothing is left in ours.
  if (current === undefined && (await namedNetnsInodes()).has(inode)) return [];
  const pids: number[] = [];
  for (const entry of await readdir('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    const link = await readlink(`/proc/${entry}/ns/net`).catch(() => ''); // gone meanwhile
    if (link === `net:[${inode}]`) pids.push(Number(entry));
  }
  return pids;
}

async function namedNetnsInodes(): Promise<Set<number>> {
  const names = await readdir('/var/run/netns').catch(() => [] as string[]);
  const inodes = await Promise.all(names.map((n) => namedNetnsInode(n)));
  return new Set(inodes.filter((i): i is number => i !== undefined));
}

/** The pids of all processes whose command line mentions the session (runc, its init). */
export async function processesMentioning(text: string): Promise<number[]> {
  const pids: number[] = [];
  for (const entry of await readdir('/proc')) {
    if (!/^\d+$/.test(entry) || Number(entry) === process.pid) continue;
    try {
      const cmdline = (await readFile(`/proc/${entry}/cmdline`, 'utf8')).replace(/\0/g, ' ');
      if (cmdline.includes(text)) pids.push(Number(entry));
    } catch {
      // gone meanwhile
    }
  }
  return pids;
}

/**
 * The processes still mentioning `text` once none is left or `timeoutMs` passed: a process
 * killed with its parent (a pdeathsig, as the Firecracker emulator's guest QEMU) ends a moment
 * after it, longer under load while the kernel frees its memory.
 */
export async function processesMentioningAfterExit(text: string, timeoutMs = 5_000): Promise<number[]> {
  const deadline = Date.now() + timeoutMs;
  let left = await processesMentioning(text);
  while (left.length > 0 && Date.now() < deadline) {
    await new Promise((resolve) => setTimeout(resolve, 100));
    left = await processesMentioning(text);
  }
  return left;
}

/**
 * The cgroup directories that exist for a cgroup path (as runc's `cgroupsPath`), on either
 * hierarchy: under cgroup v2 one directory in the unified tree; under v1 one per controller
 * (`/sys/fs/cgroup/<controller>/<path>`). Checking a v1 path on a v2 host (or the reverse)
 * would find nothing whatever happened, so tests assert this is non-empty while it lives.
 */
export async function cgroupDirsOf(cgroupPath: string): Promise<string[]> {
  const root = '/sys/fs/cgroup';
  if (existsSync(`${root}/cgroup.controllers`)) return existsSync(`${root}${cgroupPath}`) ? [`${root}${cgroupPath}`] : [];
  const dirs: string[] = [];
  for (const entry of await readdir(root, { withFileTypes: true })) {
    // v1 mounts each controller once; "cpu,cpuacct" style links point at the same mount.
    if (!entry.isDirectory()) continue;
    const dir = `${root}/${entry.name}${cgroupPath}`;
    if (existsSync(dir)) dirs.push(dir);
  }
  return dirs;
}

/**
 * The forms in which an OpenSSH ed25519 private key could be found in a file: the PEM, each
 * line of its base64 body, and the 32-byte secret seed (raw, base64, base64url, hex).
 */
export function privateKeyForms(openSshPrivateKey: string): Buffer[] {
  const parsed = ssh2.utils.parseKey(openSshPrivateKey);
  if (parsed instanceof Error) throw parsed;
  const jwk = createPrivateKey(parsed.getPrivatePEM()).export({ format: 'jwk' });
  const seed = Buffer.from(jwk.d ?? '', 'base64url');
  if (seed.length !== 32) throw new Error('not an ed25519 private key');
  // Body lines this key shares with any other (the format's header) would find every key.
  const shared = new Set(generateClientKey('reference').private.split('\n'));
  const bodyLines = openSshPrivateKey.split('\n').filter((l) => /^[A-Za-z0-9+/=]{40,}$/.test(l) && !shared.has(l));
  return [openSshPrivateKey.trim(), ...bodyLines, seed.toString('base64'), seed.toString('base64url'), seed.toString('hex')]
    .map((text) => Buffer.from(text))
    .concat(seed);
}

/**
 * The parts of a file that hold data ([start, end) byte ranges): a sparse disk image's holes
 * (gigabytes of zeros a read would make up) are skipped (lseek SEEK_DATA/SEEK_HOLE, which Node
 * does not offer: Python's os.lseek does).
 */
async function dataRanges(file: string): Promise<Array<[number, number]>> {
  const script = [
    'import os, sys',
    'fd = os.open(sys.argv[1], os.O_RDONLY); end = os.fstat(fd).st_size; at = 0',
    'while at < end:',
    '    try: start = os.lseek(fd, at, os.SEEK_DATA)',
    '    except OSError: break',
    '    at = os.lseek(fd, start, os.SEEK_HOLE); print(start, at)',
  ].join('\n');
  const { stdout } = await run(['python3', '-I', '-c', script, file]);
  return stdout
    .split('\n')
    .filter(Boolean)
    .map((line) => line.split(' ').map(Number) as [number, number]);
}

/** Whether the file's data holds any of the needles (a needle across a hole's edge is not looked for: they are random secrets). */
async function holdsAny(file: string, needles: Buffer[], longest: number): Promise<boolean> {
  const big = (await stat(file)).size > 16 * 2 ** 20;
  for (const [start, end] of big ? await dataRanges(file) : [[0, Infinity] as [number, number]]) {
    let tail = Buffer.alloc(0);
    const last = end === Infinity ? undefined : end - 1;
    for await (const chunk of createReadStream(file, { start, end: last, highWaterMark: 1 << 20 }) as AsyncIterable<Buffer>) {
      const window = Buffer.concat([tail, chunk]);
      if (needles.some((n) => window.includes(n))) return true;
      tail = window.subarray(Math.max(0, window.length - longest + 1));
    }
  }
  return false;
}

/**
 * Every regular file under `dir` that holds any of `needles`, read in chunks (disk images
 * included) with an overlap so that a needle across two chunks is found.
 */
export async function filesHolding(dir: string, needles: Buffer[]): Promise<string[]> {
  const longest = Math.max(...needles.map((n) => n.length));
  const found: string[] = [];
  // Not into what is mounted below it: a session's view of the shared, read-only image holds
  // nothing of a session's and is a whole root file system per session (minutes to read on a
  // busy host). The session's own disk image is a file of the state dir, and is read.
  const mounted = new Set(await mountsUnder(dir));
  const walk = async (at: string): Promise<void> => {
    for (const entry of await readdir(at, { withFileTypes: true }).catch(() => [])) {
      const file = path.join(at, entry.name);
      if (entry.isDirectory()) {
        if (!mounted.has(file)) await walk(file);
        continue;
      }
      if (!entry.isFile()) continue;
      if (await holdsAny(file, needles, longest).catch(() => false)) found.push(file); // gone meanwhile: a socket, a file removed as we read
    }
  };
  await walk(await realpath(dir));
  return found;
}
