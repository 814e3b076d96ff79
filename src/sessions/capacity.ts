import { readFileSync } from 'node:fs';
import os from 'node:os';
import { HostCapacityError, TenantLimitError } from '../errors.js';

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
  release(): void;
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

  constructor(
    readonly limits: CapacityLimits,
    private readonly availableMiB: () => number | undefined = memAvailableMiB,
  ) {}

  /** Takes a slot for `tenant`, or throws 429 (tenant limit) or 503 (host full) having taken nothing. */
  reserve(tenant: string): CapacitySlot {
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
    this.total++;
    this.booting++;
    this.perTenant.set(tenant, mine + 1);
    return this.slot(tenant, true);
  }

  private slot(tenant: string, startsBooting: boolean): CapacitySlot {
    let booting = startsBooting;
    let held = true;
    const stopBooting = () => {
      if (booting) this.booting--;
      booting = false;
    };
    return {
      booted: stopBooting,
      release: () => {
        if (!held) return;
        held = false;
        stopBooting();
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
  hold(tenant: string): CapacitySlot {
    this.total++;
    this.perTenant.set(tenant, (this.perTenant.get(tenant) ?? 0) + 1);
    return this.slot(tenant, false);
  }

  /** Sessions holding a slot, all tenants and per tenant (for logs and tests). */
  usage(): { total: number; booting: number; perTenant: Record<string, number> } {
    return { total: this.total, booting: this.booting, perTenant: Object.fromEntries(this.perTenant) };
  }
}
