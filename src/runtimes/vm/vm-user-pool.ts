import { createHash } from 'node:crypto';
import { readdir, readFile } from 'node:fs/promises';
import type { TapOwner } from '../../network/netns.js';
import type { CleanupStack } from '../../util/cleanup-stack.js';
import { envInt, positive, type Env } from '../../util/env.js';
import type { RecordResource } from '../runtime.js';

/** The ids VMMs run under: `base` to `base + count - 1`, uid and gid alike (SBX_VM_UID_BASE, SBX_VM_UID_COUNT). */
export interface VmUserRange {
  base: number;
  count: number;
}

/** SBX_VM_UID_BASE and SBX_VM_UID_COUNT as given (either may be unset). */
export interface VmUserSettings {
  base?: number;
  count?: number;
}

/** SBX_VM_UID_BASE and SBX_VM_UID_COUNT (both VM runtimes); unset ones take the pool's defaults. */
export function vmUserSettingsFromEnv(env: Env): VmUserSettings {
  const settings: VmUserSettings = {};
  if (env.SBX_VM_UID_BASE) settings.base = envInt('SBX_VM_UID_BASE', 0, env);
  if (env.SBX_VM_UID_COUNT) settings.count = positive('SBX_VM_UID_COUNT', envInt('SBX_VM_UID_COUNT', 0, env));
  return settings;
}

export const VM_UID_DEFAULT_BASE = 900_000;
export const VM_UID_DEFAULT_COUNT = 4_096;
/** The VMM uid blocks of every prefix with the defaults (vmUserRange: block 0 for sbx-, 1..255 for others). */
const VM_UID_DEFAULT_BLOCKS = 256;

/**
 * Whether host ids [first, first + size) meet the VMMs' default uids, whatever the prefix. They
 * lie inside the default block of the containers' host id ranges (200000 + k * 65536), and a
 * container guest's root whose host uid were a VMM's could signal it and open its disks: the
 * container ranges that meet them are never leased (container/id-leases.ts).
 */
export function meetsDefaultVmUids(first: number, size: number): boolean {
  const end = VM_UID_DEFAULT_BASE + VM_UID_DEFAULT_BLOCKS * VM_UID_DEFAULT_COUNT;
  return first < end && first + size > VM_UID_DEFAULT_BASE;
}

/**
 * The range of an orchestrator: SBX_VM_UID_BASE if set, else 900000 plus a block of
 * SBX_VM_UID_COUNT derived from the resource prefix (the default prefix "sbx-" gets block
 * 0), so that two orchestrators on one host (a test suite beside a dev server) do not lease
 * from the same ids by default.
 */
export function vmUserRange(settings: VmUserSettings, prefix: string): VmUserRange {
  const count = settings.count ?? VM_UID_DEFAULT_COUNT;
  if (settings.base !== undefined) return { base: settings.base, count };
  const block = prefix === 'sbx-' ? 0 : 1 + (createHash('sha256').update(prefix).digest().readUInt16BE(0) % (VM_UID_DEFAULT_BLOCKS - 1));
  return { base: VM_UID_DEFAULT_BASE + block * count, count };
}

/** A VMM's own uid and gid (the same number); also who owns its TAP and its disks. */
export type VmUser = TapOwner;

/**
 * Leases each VMM a uid/gid of its own, so that no two VMs share one: a compromised VMM can
 * then neither signal nor ptrace another, read its disks, nor eat the per-uid kernel limits
 * (processes, inotify watches, locked memory) of its neighbours, as it could when every
 * VMM ran as `nobody` (or as root).
 *
 * The range must be used by nothing else on the host (no user, no other software). A uid is
 * free when this pool has not leased it AND no process on the host runs under it: the
 * second check is what keeps a VMM that outlived a crashed orchestrator (or one of another
 * orchestrator on this host, with another prefix) from sharing its uid with a new one. The
 * lease is recorded in the session's ledger (kind `vm-user`) so that a crash leaves a trace
 * of it; a VM adopted after a restart claims its uid again from its running process.
 */
export class VmUserPool {
  private readonly held = new Set<number>();

  constructor(readonly range: VmUserRange) {
    if (!Number.isInteger(range.base) || range.base < 1_000 || !Number.isInteger(range.count) || range.count < 1 || range.base + range.count > 2 ** 32 - 2) {
      throw new Error(`the VM uid range must be whole numbers, start at 1000 or above and end below 4294967294; got base ${range.base}, count ${range.count}`);
    }
  }

  /** Takes the lowest free uid, pushes its release, and records it in the ledger first. */
  async lease(cleanup: CleanupStack, record?: RecordResource): Promise<VmUser> {
    const running = await uidsWithProcesses();
    for (let uid = this.range.base; uid < this.range.base + this.range.count; uid++) {
      if (this.held.has(uid) || running.has(uid)) continue;
      this.held.add(uid); // synchronously after the check: two leases never get the same uid
      record?.('vm-user', String(uid));
      await cleanup.push(`vm user ${uid}`, () => this.release(uid));
      return { uid, gid: uid };
    }
    throw new Error(`every VM uid is taken (SBX_VM_UID_BASE=${this.range.base}, SBX_VM_UID_COUNT=${this.range.count}): destroy a session or widen the range`);
  }

  /** A VM of an earlier run, adopted: its uid is held again. */
  claim(uid: number): void {
    if (this.contains(uid)) this.held.add(uid);
  }

  release(uid: number): void {
    this.held.delete(uid);
  }

  contains(uid: number): boolean {
    return uid >= this.range.base && uid < this.range.base + this.range.count;
  }

  get inUse(): number {
    return this.held.size;
  }
}

/** The real uid of a process, from /proc (undefined if it is gone). */
export async function processUid(pid: number): Promise<number | undefined> {
  const status = await readFile(`/proc/${pid}/status`, 'utf8').catch(() => '');
  const match = /^Uid:\s+(\d+)/m.exec(status);
  return match ? Number(match[1]) : undefined;
}

/** Every uid some process on the host runs under now. */
async function uidsWithProcesses(): Promise<Set<number>> {
  const uids = new Set<number>();
  for (const entry of await readdir('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    const uid = await processUid(Number(entry));
    if (uid !== undefined) uids.add(uid);
  }
  return uids;
}
