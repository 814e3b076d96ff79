import type { Metrics } from '../../metrics/metrics.js';
import { atLeast, envInt, type Env } from '../../util/env.js';

/**
 * How much of the guest's shell output the orchestrator reads, per session. Every byte the
 * guest writes is decrypted and handled in the orchestrator's process; past these limits
 * the shell's channel is no longer read, so SSH flow control (the channel's window, 2 MiB)
 * makes the guest's writes block instead of the orchestrator spending a core on them.
 */
export interface BashOutputLimits {
  /** Bytes a second read from one shell on average (SBX_BASH_OUTPUT_BYTES_PER_SECOND, 8 MiB/s)... */
  bytesPerSecond: number;
  /** ... and at once before the rate applies (SBX_BASH_OUTPUT_BURST_BYTES, 64 MiB). */
  burstBytes: number;
  /**
   * Output written while no command runs (a background job's) read at most this far
   * (SBX_BASH_UNREAD_OUTPUT_BYTES, 256 KiB); then the channel is not read until the next
   * command, so such a job blocks on its writes meanwhile.
   */
  maxUnreadBytes: number;
}

export const DEFAULT_BASH_OUTPUT_LIMITS: BashOutputLimits = {
  bytesPerSecond: 8 * 1024 * 1024,
  burstBytes: 64 * 1024 * 1024,
  maxUnreadBytes: 256 * 1024,
};

/** What a shell tells the metrics (sandbox_bash_output_*): bytes read but not kept, time it was not read. */
export interface BashOutputCounters {
  dropped(bytes: number, phase: 'command' | 'between_commands'): void;
  throttled(seconds: number, reason: 'rate' | 'unread_cap'): void;
}

/** Both, as the run loop's tools take them. */
export interface BashOutput {
  limits: BashOutputLimits;
  counters: BashOutputCounters;
}

export const NO_COUNTERS: BashOutputCounters = { dropped: () => undefined, throttled: () => undefined };

/** The counters on the orchestrator's metrics. */
export function bashOutputCounters(metrics: Metrics): BashOutputCounters {
  return {
    dropped: (bytes, phase) => metrics.bashOutputDroppedBytes.inc({ phase }, bytes),
    throttled: (seconds, reason) => metrics.bashOutputThrottledSeconds.inc({ reason }, seconds),
  };
}

/**
 * A token bucket of bytes: `charge` takes what was read and says how long to stop reading
 * for the average to come back to the rate. A debt is allowed (a chunk is read whole before
 * it is charged): the wait pays it back.
 */
export class ByteBudget {
  private tokens: number;
  private last: number;

  constructor(
    private readonly bytesPerSecond: number,
    private readonly burstBytes: number,
    private readonly now: () => number = () => performance.now(),
  ) {
    this.tokens = burstBytes;
    this.last = now();
  }

  /** Takes `bytes`; returns the milliseconds to wait before reading again (0: go on). */
  charge(bytes: number): number {
    const now = this.now();
    this.tokens = Math.min(this.burstBytes, this.tokens + ((now - this.last) / 1000) * this.bytesPerSecond);
    this.last = now;
    this.tokens -= bytes;
    return this.tokens >= 0 ? 0 : Math.ceil((-this.tokens / this.bytesPerSecond) * 1000);
  }
}

/** Reads the SBX_BASH_OUTPUT_* / SBX_BASH_UNREAD_OUTPUT_BYTES settings (docs/configuration.md). */
export function bashOutputLimitsFromEnv(env: Env): BashOutputLimits {
  const d = DEFAULT_BASH_OUTPUT_LIMITS;
  return {
    bytesPerSecond: byteSetting(env, 'SBX_BASH_OUTPUT_BYTES_PER_SECOND', d.bytesPerSecond, 64 * 1024),
    burstBytes: byteSetting(env, 'SBX_BASH_OUTPUT_BURST_BYTES', d.burstBytes, 64 * 1024),
    maxUnreadBytes: byteSetting(env, 'SBX_BASH_UNREAD_OUTPUT_BYTES', d.maxUnreadBytes, 4096),
  };
}

function byteSetting(env: Env, name: string, fallback: number, min: number): number {
  return atLeast(name, envInt(name, fallback, env), min);
}
