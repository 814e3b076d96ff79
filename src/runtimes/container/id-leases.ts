import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, openSync, closeSync, readFileSync, writeSync, writeFileSync, renameSync } from 'node:fs';
import { readdir, readFile, stat, unlink } from 'node:fs/promises';
import path from 'node:path';
import { meetsDefaultVmUids } from '../vm/vm-user-pool.js';
import { ID_RANGE_SIZE, MAX_ID_RANGES } from './settings.js';

/**
 * Host id ranges are a host-wide resource: two orchestrators on one host (a test suite
 * beside a dev server; two tenants' services) must never give two sandboxes the same host
 * uids, or one guest's root could own the other's files and signal its processes. Each
 * orchestrator's store knows only its own leases, so:
 *
 *  - each resource prefix starts at a base of its own (hostIdBase), so that two
 *    orchestrators rarely even look at the same ranges;
 *  - and every range is also leased host-wide, by creating a file named after its first id
 *    in one directory (/run/sbx-id-ranges, tmpfs: gone at reboot, like every container)
 *    with O_EXCL: of two orchestrators that want the same range at the same moment, one
 *    creates the file and the other sees it and moves on. The file names the state dir of
 *    the orchestrator that holds it (the same across its restarts) and the session.
 *
 * A lease file is removed when its session is gone (the container runtime's release, or the
 * reclaim after a crash). One held by another orchestrator is taken over only when it is
 * stale: older than STALE_AFTER_MS (or its holder's state dir is gone) and no process on
 * the host has the range in its uid_map.
 */

/** A lease this old whose range no process uses was left by an orchestrator that died (creates take seconds). */
const STALE_AFTER_MS = 10 * 60_000;

/** The default first host id of an orchestrator's ranges: 200000 for "sbx-", another block per other prefix. */
export function hostIdBase(prefix: string): number {
  const span = MAX_ID_RANGES * ID_RANGE_SIZE;
  // Blocks 1..61 above block 0, all below 2^32 - 1 (the kernel's "no id").
  const blocks = Math.floor((2 ** 32 - 1 - 200_000) / span) - 1;
  const block = prefix === 'sbx-' ? 0 : 1 + (createHash('sha256').update(prefix).digest().readUInt16BE(0) % blocks);
  return 200_000 + block * span;
}

/**
 * The first host id above every prefix's block (hostIdBase): where `sbx template build` takes
 * the ranges its steps run in (templates/build-container.ts), so that a build's root is no
 * sandbox's, whatever the prefixes on the host. Room for 1020 ranges up to 2^32 - 1.
 */
export function buildIdBase(): number {
  const span = MAX_ID_RANGES * ID_RANGE_SIZE;
  return 200_000 + Math.floor((2 ** 32 - 1 - 200_000) / span) * span;
}

export interface LeaseOwner {
  stateDir: string;
  sessionId: string;
  prefix: string;
}

export class HostIdLeases {
  constructor(
    private readonly dir: string,
    private readonly owner: { stateDir: string; prefix: string },
  ) {}

  /**
   * A predicate for the store's lease (store.leaseIdRange): takes the range host-wide and
   * says whether it got it. Synchronous (the store leases in one transaction); call
   * `staleRanges()` first, which may need to look at every process's uid_map.
   */
  taker(sessionId: string, stale: ReadonlySet<number>): (first: number) => boolean {
    mkdirSync(this.dir, { recursive: true, mode: 0o700 });
    return (first) => {
      // Never a range that holds a VMM's uid (vm-user-pool.ts): its guest root could reach that VM.
      if (meetsDefaultVmUids(first, ID_RANGE_SIZE)) return false;
      const file = this.fileOf(first);
      const mine: LeaseOwner = { ...this.owner, sessionId };
      try {
        const fd = openSync(file, 'wx', 0o600);
        try {
          writeSync(fd, JSON.stringify(mine));
        } finally {
          closeSync(fd);
        }
        return true;
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
      }
      const held = readOwner(file);
      // Ours (our store's ledger just said no session of ours holds it: a crash left it), or stale.
      if (held?.stateDir !== this.owner.stateDir && !stale.has(first)) return false;
      const temp = `${file}.${process.pid}.tmp`;
      writeFileSync(temp, JSON.stringify(mine), { mode: 0o600 });
      renameSync(temp, file);
      return true;
    };
  }

  /** Ranges leased by other orchestrators that are stale (see above); usually none, and then no process is looked at. */
  async staleRanges(): Promise<Set<number>> {
    const old: number[] = [];
    for (const name of await readdir(this.dir).catch(() => [] as string[])) {
      if (!/^\d+$/.test(name)) continue;
      const file = this.fileOf(Number(name));
      const held = readOwner(file);
      if (held?.stateDir === this.owner.stateDir) continue;
      const age = await stat(file).then(
        (s) => Date.now() - s.mtimeMs,
        () => 0,
      );
      // Its holder's state dir gone: that orchestrator (a test's, say) is gone for good.
      if (age > STALE_AFTER_MS || (held && !existsSync(held.stateDir))) old.push(Number(name));
    }
    if (old.length === 0) return new Set();
    const live = await liveHostIdRanges();
    return new Set(old.filter((first) => !live.some((r) => r.first < first + ID_RANGE_SIZE && first < r.first + r.size)));
  }

  /** Gives a session's range back host-wide, if this orchestrator's session still holds the file. */
  async release(first: number, sessionId: string): Promise<void> {
    const file = this.fileOf(first);
    const held = readOwner(file);
    if (held?.stateDir === this.owner.stateDir && held.sessionId === sessionId) await unlink(file).catch(() => undefined);
  }

  /** After a crash: every range a session of this orchestrator holds host-wide is given back. */
  async releaseSession(sessionId: string): Promise<void> {
    for (const name of await readdir(this.dir).catch(() => [] as string[])) {
      if (/^\d+$/.test(name)) await this.release(Number(name), sessionId);
    }
  }

  private fileOf(first: number): string {
    return path.join(this.dir, String(first));
  }
}

function readOwner(file: string): LeaseOwner | undefined {
  try {
    return JSON.parse(readFileSync(file, 'utf8')) as LeaseOwner;
  } catch {
    return undefined; // gone meanwhile, or half-written by a process killed mid-write: not ours
  }
}

/** The host id ranges of every user namespace a process on the host is in (but the host's own). */
export async function liveHostIdRanges(): Promise<Array<{ first: number; size: number }>> {
  const ranges = new Map<string, { first: number; size: number }>();
  for (const entry of await readdir('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    const map = await readFile(`/proc/${entry}/uid_map`, 'utf8').catch(() => '');
    for (const line of map.split('\n')) {
      const [inside, outside, count] = line.trim().split(/\s+/).map(Number);
      if (inside === undefined || outside === undefined || count === undefined || Number.isNaN(count)) continue;
      if (outside === 0 && count >= 2 ** 32 - 1) continue; // the host's own namespace
      ranges.set(`${outside}:${count}`, { first: outside, size: count });
    }
  }
  return [...ranges.values()];
}
