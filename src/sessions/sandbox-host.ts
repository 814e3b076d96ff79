import type { Logger } from 'pino';
import type { AddressLease } from '../network/address-pool.js';
import type { PauseMode, PauseResult } from '../runtimes/runtime.js';
import type { PooledSandbox } from './pool/warm-pool.js';
import type { SandboxWatch } from './sandbox-watch.js';
import type { Session } from './session.js';
import type { ControlTransport, SessionRecord } from './session-record.js';

/**
 * Everything the session lifecycle asks of the host, in one narrow interface: boot a sandbox
 * (keys, network and policy, the runtime, SSH, the desktop), claim a pooled one, watch one,
 * take back or reclaim what an earlier run left. The lifecycle decides *when*; this says *how*.
 *
 * The real one (host-sandboxes.ts) runs it all for real, as root; the unit tests give the
 * lifecycle one made over a fake Runtime (test/helpers/fake-runtime.ts), so that its state
 * machine is tested without root in milliseconds.
 */
export interface SandboxHost {
  /** What carries the control channel of the sandboxes it boots (the runtime's capability). */
  readonly controlTransport: ControlTransport;
  /** Throws the 503 a create must answer while the network policy is not in force. */
  assertCreatesAllowed(): Promise<void>;
  /**
   * Boots a session's sandbox and attaches its connection and desktop (session.sandbox,
   * .connection, .computer). Every resource's release goes onto session.cleanup as it is
   * taken: the caller runs the stack if this throws.
   */
  boot(session: Session, lease: AddressLease | undefined, log: Logger): Promise<void>;
  /** A sandbox for the warm pool: booted and known ready, with no connection kept. */
  bootPooled(session: Session, lease: AddressLease | undefined, log: Logger): Promise<PooledSandbox>;
  /** Hands a pooled sandbox to the session's own key and attaches its desktop. */
  claim(pooled: PooledSandbox): Promise<void>;
  /** Watches what a live sandbox cannot do without (sandbox-watch.ts). */
  watch(session: Session): SandboxWatch | undefined;
  /** The last lines its guest printed, for a failed boot's error. */
  consoleTail(session: Session): Promise<string>;
  /** A ready session of an earlier run, taken back alive, or undefined (adopt.ts). */
  adopt(record: SessionRecord): Promise<Session | undefined>;
  /**
   * Reclaims everything an earlier run left that is not `adopted`, then puts the network
   * policy in force for the adopted ones and keeps it so. Returns how many were reclaimed.
   */
  recover(adopted: readonly Session[]): Promise<number>;
  /** The pause modes the runtime does on this host (pause.ts picks `auto` from them). */
  pauseModes(): readonly PauseMode[];
  /** Why a pause mode is not available here (undefined: it is). */
  pauseUnavailable(mode: PauseMode): string | undefined;
  /** The most a disk pause of a sandbox of `memoryMiB` writes to the host, MiB (undefined: the runtime does not say). */
  pauseStateMaxMiB(memoryMiB: number): number | undefined;
  /** Whether a pause to disk ends the guest's side of the session's connection (RuntimeCapabilities). */
  diskPauseEndsConnection(): boolean;
  /** Whether a sandbox with volumes can be paused to disk. */
  diskPauseWithVolumes(): boolean;
  /** Pauses the session's sandbox (to disk: its connection detached first where the pause ends it). */
  pause(session: Session, mode: PauseMode): Promise<PauseResult>;
  /** Lets a paused sandbox run again (no connection yet: `attach` makes one). */
  resume(session: Session, mode: PauseMode): Promise<void>;
  /** Whether the session's sandbox is paused now (a restart asks, adopt.ts). */
  isPaused(session: Session): Promise<boolean>;
  /** Attaches a new connection and desktop to a resumed sandbox, with the session's own keys. */
  attach(session: Session, timeoutMs: number): Promise<void>;
  /** Saves the session's running sandbox into `dir` for forks (docs/snapshots.md); it runs on. */
  snapshot?(session: Session, dir: string): Promise<void>;
  /** Shutting down: stops keeping the network policy in force. */
  stopPolicyGuard(): void;
  /** Every session is gone: so goes the policy table (no rules left behind by a clean stop). */
  removePolicy(): Promise<void>;
}
