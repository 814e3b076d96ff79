import { readFileSync } from 'node:fs';
import os from 'node:os';
import { HostCapacityError, TenantLimitError } from '../errors.js';
import { DiskPromise, type DiskCapacity } from './disk-capacity.js';

export interface CapacityLimits {
  /** Sessions on this host, all tenants (SBX_MAX_SESSIONS). */
  maxSessions: number;
  /** Sessions of one tenant (SBX_MAX_SESSIONS_PER_TENANT). */
  maxSessionsPerTenant: number;
  /** The memory limit of one session (SBX_MEMORY_MIB). */
  sessionMemoryMiB: number;
  /** Memory kept for the host and the orchestrator (SBX_MEMORY_RESERVE_MIB). */
  memoryReserveMiB: number;
}

/**
 * A client over a limit is told to come back later. Nothing predicts when a session will
 * end (a destroy, an idle timeout), so this is a polite polling interval, not a promise.
 */
export const RETRY_AFTER_SECONDS = 10;

/** The default never exceeds this, however much memory there is (CPU runs out too); SBX_MAX_SESSIONS may. */
const DEFAULT_MAX_SESSIONS_CAP = 64;

/** The default host limit: as many sessions as fit in the host's memory at their limit, capped. */
export function defaultMaxSessions(sessionMemoryMiB: number, totalMiB = os.totalmem() / 2 ** 20): number {
  return Math.max(1, Math.min(DEFAULT_MAX_SESSIONS_CAP, Math.floor(totalMiB / Math.max(1, sessionMemoryMiB))));
}

/** MemAvailable of /proc/meminfo in MiB (what the kernel can give without swapping), if readable. */
export function memAvailableMiB(): number | undefined {
  try {
    const match = /^MemAvailable:\s+(\d+) kB$/m.exec(readFileSync('/proc/meminfo', 'utf8'));
    return match ? Number(match[1]) / 1024 : undefined;
  } catch {
    return undefined;
  }
}

/** A place taken by one session; give it back exactly once (more calls do nothing). */
export interface CapacitySlot {
  /** The sandbox is up: its memory now shows in MemAvailable, so stop counting it as pending. */
  booted(): void;
  /** How much of its disk promise the session's files already hold (MiB), once it has a directory. */
  measureDisk(usedMiB: () => number): void;
  release(): void;
}

/** What one create asks for beyond a slot. */
export interface CapacityDemand {
  /** The session's writable disk, MiB (the runtime's: Runtime.writableDiskMiB); 0 when unknown. */
  diskMiB?: number;
}

/**
 * Admission control for creates. `reserve` is synchronous, so the check and the taking are
 * one step: concurrent creates cannot all pass a check that only one of them fits through.
 * A slot is held from before anything is taken until the session's resources are released
 * (its release sits at the bottom of the session's cleanup stack), so sessions being
 * created and being destroyed count as well as ready ones.
 */
export class CapacityGate {
  private total = 0;
  /** Slots whose sandbox is still booting: their memory does not show in MemAvailable yet. */
  private booting = 0;
  private readonly perTenant = new Map<string, number>();
  /** Every held slot's disk promise (disk-capacity.ts). */
  private readonly promises = new Set<DiskPromise>();

  constructor(
    readonly limits: CapacityLimits,
    private readonly availableMiB: () => number | undefined = memAvailableMiB,
    /** Disk admission; absent: disk is not checked (tests of other limits). */
    private readonly disk?: DiskCapacity,
  ) {}

  /** Takes a slot for `tenant`, or throws 429 (tenant limit) or 503 (host full) having taken nothing. */
  reserve(tenant: string, demand: CapacityDemand = {}): CapacitySlot {
    const { maxSessions, maxSessionsPerTenant, sessionMemoryMiB, memoryReserveMiB } = this.limits;
    const mine = this.perTenant.get(tenant) ?? 0;
    if (mine >= maxSessionsPerTenant) {
      throw new TenantLimitError(
        `tenant "${tenant}" has ${mine} sessions, its limit (SBX_MAX_SESSIONS_PER_TENANT=${maxSessionsPerTenant}): destroy one, or retry later`,
        RETRY_AFTER_SECONDS,
      );
    }
    if (this.total >= maxSessions) {
      throw new HostCapacityError(
        `this host runs ${this.total} sessions, its limit (SBX_MAX_SESSIONS=${maxSessions}): retry later`,
        'host_session_limit',
        RETRY_AFTER_SECONDS,
      );
    }
    const available = this.availableMiB();
    if (available !== undefined) {
      // Sandboxes still booting are counted at their full limit: they will take it soon.
      const free = Math.floor(available - memoryReserveMiB - this.booting * sessionMemoryMiB);
      if (free < sessionMemoryMiB) {
        throw new HostCapacityError(
          `not enough memory on this host for another session: ${Math.max(0, free)} MiB free after the reserve ` +
            `(SBX_MEMORY_RESERVE_MIB=${memoryReserveMiB}), a session may use ${sessionMemoryMiB} MiB (SBX_MEMORY_MIB): retry later`,
          'host_memory_low',
          RETRY_AFTER_SECONDS,
        );
      }
    }
    const promise = this.diskPromise(demand);
    this.checkDisk(promise);
    this.total++;
    this.booting++;
    this.perTenant.set(tenant, mine + 1);
    return this.slot(tenant, true, promise);
  }

  /** The disk a session is promised: its writable disk and its artifacts (0 without disk admission). */
  private diskPromise(demand: CapacityDemand): DiskPromise {
    return new DiskPromise(this.disk ? Math.max(0, demand.diskMiB ?? 0) + this.disk.limits.artifactsMiB : 0);
  }

  /** The free space left above the reserve and every held promise, MiB (undefined: disk is not checked here). */
  diskRoomMiB(): number | undefined {
    const free = this.disk?.freeMiB();
    if (!this.disk || free === undefined) return undefined;
    let outstanding = 0;
    for (const held of this.promises) outstanding += held.outstandingMiB();
    return free - this.disk.limits.reserveMiB - outstanding;
  }

  /** Throws 503 host_disk_low unless every promise, this one too, fits in the free space above the reserve. */
  private checkDisk(promise: DiskPromise): void {
    const room = this.diskRoomMiB();
    if (!this.disk || room === undefined) return;
    const free = this.disk.freeMiB() ?? 0;
    let outstanding = 0;
    for (const held of this.promises) outstanding += held.outstandingMiB();
    const { reserveMiB } = this.disk.limits;
    if (Math.floor(room) < promise.promisedMiB) {
      // Under 300 characters: a 503's message reaches the client whole only that short (api/public-message.ts).
      throw new HostCapacityError(
        `not enough disk for another session: ${Math.floor(free)} MiB free in the state dir, ${Math.ceil(outstanding)} MiB promised to ` +
          `${this.promises.size} sessions, ${reserveMiB} MiB kept (SBX_DISK_RESERVE_MIB); a session needs ${Math.ceil(promise.promisedMiB)} MiB ` +
          '(its SBX_DISK_MIB and recording and trajectory caps): retry later, or free disk space',
        'host_disk_low',
        RETRY_AFTER_SECONDS,
      );
    }
  }

  private slot(tenant: string, startsBooting: boolean, promise: DiskPromise): CapacitySlot {
    let booting = startsBooting;
    let held = true;
    this.promises.add(promise);
    const stopBooting = () => {
      if (booting) this.booting--;
      booting = false;
    };
    return {
      booted: stopBooting,
      measureDisk: (usedMiB) => promise.measure(usedMiB),
      release: () => {
        if (!held) return;
        held = false;
        stopBooting();
        this.promises.delete(promise);
        this.total--;
        const left = (this.perTenant.get(tenant) ?? 1) - 1;
        if (left > 0) this.perTenant.set(tenant, left);
        else this.perTenant.delete(tenant);
      },
    };
  }

  /**
   * A slot for a session that runs already (adopted at start-up), taken without checking
   * the limits: refusing it would not stop it. It may leave the host over a lowered limit
   * until sessions end; new creates are refused meanwhile.
   */
  hold(tenant: string, demand: CapacityDemand = {}): CapacitySlot {
    this.total++;
    this.perTenant.set(tenant, (this.perTenant.get(tenant) ?? 0) + 1);
    return this.slot(tenant, false, this.diskPromise(demand));
  }

  /** Sessions holding a slot, all tenants and per tenant (for logs and tests). */
  usage(): { total: number; booting: number; perTenant: Record<string, number> } {
    return { total: this.total, booting: this.booting, perTenant: Object.fromEntries(this.perTenant) };
  }
}
