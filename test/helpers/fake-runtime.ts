/**
 * A Runtime in memory, and a SandboxHost made over it, for the unit tier: the session
 * layer's state machine (registry, lifecycle, clocks, capacity, warm pool, adoption) runs
 * for real against them, without root, a network or a guest. A test decides what the
 * "host" does: when a start finishes or fails, when a sandbox exits or its network goes.
 */
import pino, { type Logger } from 'pino';
import { ComputerTool } from '../../src/computer/computer-tool.js';
import { Desktop } from '../../src/computer/desktop.js';
import { Scaler } from '../../src/computer/scaling.js';
import type { GuestImage } from '../../src/guest/image/builder.js';
import type { AddressLease } from '../../src/network/address-pool.js';
import type {
  AdoptedSandbox,
  ExitInfo,
  PauseMode,
  PauseResult,
  PauseTarget,
  RunningSandbox,
  Runtime,
  RuntimeCapabilities,
  SandboxSpec,
} from '../../src/runtimes/runtime.js';
import type { PooledSandbox } from '../../src/sessions/pool/warm-pool.js';
import type { SandboxHost } from '../../src/sessions/sandbox-host.js';
import type { SandboxGone, SandboxWatch } from '../../src/sessions/sandbox-watch.js';
import { Session } from '../../src/sessions/session.js';
import type { SessionRecord } from '../../src/sessions/session-record.js';
import type { SessionStore } from '../../src/sessions/store.js';
import type { CleanupStack } from '../../src/util/cleanup-stack.js';
import { FakeTransport } from './fake-transport.js';

export const FAKE_IMAGE: GuestImage = {
  hash: 'fake',
  dir: '/nonexistent',
  rootfs: '/nonexistent/rootfs',
  ext4: '/nonexistent/rootfs.ext4',
  kernel: '/nonexistent/vmlinuz',
  initrd: '/nonexistent/initrd.img',
};

/** One sandbox of the fake runtime. */
export class FakeSandbox implements RunningSandbox {
  readonly endpoint = { transport: 'unix' as const, path: '/nonexistent/fake-guest.sock' };
  readonly consoleLogPath = '/nonexistent/console.log';
  readonly pid = process.pid;
  readonly exited: Promise<ExitInfo>;
  running = true;
  /** Frozen by a pause (memory mode). */
  paused = false;
  /** How many times its release ran (a leak shows as 0, a double release as 2). */
  releases = 0;
  private settleExit: (info: ExitInfo) => void = () => undefined;

  constructor(
    readonly sessionId: string,
    /** The image it was started from (the session's template's). */
    readonly imageHash = FAKE_IMAGE.hash,
  ) {
    this.exited = new Promise((resolve) => (this.settleExit = resolve));
  }

  isAlive = (): boolean => this.running;

  /** The sandbox stops by itself (a crash, a kill, a poweroff). */
  exit(reason = 'killed by the test'): void {
    if (!this.running) return;
    this.running = false;
    this.settleExit({ code: null, reason });
  }
}

/** A deferred step: a start (or claim) waits on it when the test holds it. */
export interface Gate {
  promise: Promise<void>;
  open(): void;
  fail(err: Error): void;
}

export function gate(): Gate {
  let open: () => void = () => undefined;
  let fail: (err: Error) => void = () => undefined;
  const promise = new Promise<void>((resolve, reject) => {
    open = resolve;
    fail = reject;
  });
  return { promise, open, fail };
}

export class FakeRuntime implements Runtime {
  readonly name = 'container' as const;
  readonly capabilities: RuntimeCapabilities;
  /** Every sandbox started, by session id. */
  readonly sandboxes = new Map<string, FakeSandbox>();
  /** Sandboxes an "earlier run" left running, which adopt() finds. */
  readonly leftRunning = new Map<string, FakeSandbox>();
  readonly reclaimed: string[] = [];
  /** Forks started: the snapshot directory each was given, by session id. */
  readonly forkedFrom = new Map<string, string>();
  /** A test's snapshot of a sandbox (absent: this runtime cannot snapshot). */
  snapshot: ((target: PauseTarget, dir: string) => Promise<void>) | undefined;
  /** When set, the next starts wait on it (to race a destroy against a boot). */
  startGate: Gate | undefined;
  /** When set, starts throw this. */
  startError: Error | undefined;
  /** The pause modes it offers (default memory only, as the container runtime here). */
  modes: PauseMode[] = ['memory'];
  /** When set, pauses throw this (the sandbox is left running). */
  pauseError: Error | undefined;
  readonly pauses: Array<{ sessionId: string; mode: PauseMode }> = [];

  constructor(capabilities: Partial<RuntimeCapabilities> = {}) {
    this.capabilities = {
      networkAttachment: 'veth',
      guestConfiguresNetwork: false,
      configDirIsLive: true,
      bootTimeoutMs: 0,
      hostOnlySources: [],
      sharesHostKernel: true,
      ...capabilities,
    };
  }

  describe(): string {
    return 'fake (in memory, for unit tests)';
  }

  async start(spec: SandboxSpec, cleanup: CleanupStack): Promise<RunningSandbox> {
    if (this.startGate) await this.startGate.promise;
    if (this.startError) throw this.startError;
    if (spec.snapshot) this.forkedFrom.set(spec.sessionId, spec.snapshot.dir);
    const sandbox = new FakeSandbox(spec.sessionId, spec.image.hash);
    this.sandboxes.set(spec.sessionId, sandbox);
    await cleanup.push(`fake sandbox ${spec.sessionId}`, () => this.release(sandbox));
    return sandbox;
  }

  pauseModes(): readonly PauseMode[] {
    return this.modes;
  }

  pauseUnavailable(mode: PauseMode): string | undefined {
    return this.modes.includes(mode) ? undefined : `the fake runtime does not do ${mode}`;
  }

  /** As QEMU's (its RAM and a margin). */
  pauseStateMaxMiB(memoryMiB: number): number {
    return Math.ceil(memoryMiB * 1.25 + 256);
  }

  /** As QEMU (false) or Firecracker (true). */
  volumesToDisk = false;
  diskPauseWithVolumes(): boolean {
    return this.volumesToDisk;
  }

  async pause(target: PauseTarget, mode: PauseMode): Promise<PauseResult> {
    if (this.pauseError) throw this.pauseError;
    const sandbox = this.sandboxes.get(target.sessionId) ?? this.leftRunning.get(target.sessionId);
    if (!sandbox) throw new Error(`no sandbox ${target.sessionId}`);
    sandbox.paused = true;
    this.pauses.push({ sessionId: target.sessionId, mode });
    // To disk, as the QEMU runtime does: the state saved, the sandbox's process ended.
    if (mode === 'disk') sandbox.exit('it quit after its state was saved');
    return { bytes: mode === 'disk' ? 1234 : 0 };
  }

  /** From disk: a new sandbox (a new process), as the QEMU runtime starts one. */
  async resume(target: PauseTarget, mode: PauseMode = 'memory'): Promise<AdoptedSandbox | void> {
    const sandbox = this.sandboxes.get(target.sessionId);
    if (mode === 'disk') {
      const resumed = new FakeSandbox(target.sessionId, sandbox?.imageHash);
      this.sandboxes.set(target.sessionId, resumed);
      return { sandbox: resumed, release: async () => this.release(resumed) };
    }
    if (sandbox) sandbox.paused = false;
  }

  async isPaused(target: PauseTarget): Promise<boolean> {
    return (this.sandboxes.get(target.sessionId) ?? this.leftRunning.get(target.sessionId))?.paused ?? false;
  }

  /** Sandboxes not yet released. */
  get live(): FakeSandbox[] {
    return [...this.sandboxes.values()].filter((s) => s.releases === 0);
  }

  async list(): Promise<string[]> {
    return [...this.leftRunning.keys()];
  }

  async adopt(sessionId: string): Promise<AdoptedSandbox | undefined> {
    const sandbox = this.leftRunning.get(sessionId);
    if (!sandbox?.running) return undefined;
    this.leftRunning.delete(sessionId);
    this.sandboxes.set(sessionId, sandbox);
    return { sandbox, release: async () => this.release(sandbox) };
  }

  async reclaim(sessionId: string): Promise<void> {
    this.leftRunning.delete(sessionId);
    this.reclaimed.push(sessionId);
  }

  private release(sandbox: FakeSandbox): void {
    sandbox.releases++;
    sandbox.running = false;
  }
}

/** A SandboxHost over a FakeRuntime: boots attach an (unopened) connection and desktop. */
export class FakeHost implements SandboxHost {
  /** When set, claims of pooled sandboxes throw this. */
  claimError: Error | undefined;
  /** When set, creates are refused with it (the network policy not in force). */
  createsRefused: Error | undefined;
  readonly claims: string[] = [];
  private readonly watches = new Map<string, (gone: SandboxGone) => void>();

  constructor(
    readonly runtime: FakeRuntime,
    private readonly store: SessionStore,
  ) {}

  get controlTransport(): 'tcp' | 'unix' | 'vsock' {
    return this.runtime.capabilities.controlTransport ?? 'tcp';
  }

  async assertCreatesAllowed(): Promise<void> {
    if (this.createsRefused) throw this.createsRefused;
  }

  async boot(session: Session, lease: AddressLease | undefined): Promise<void> {
    await this.start(session, lease);
    attachFakeDesktop(session);
  }

  async bootPooled(session: Session, lease: AddressLease | undefined): Promise<PooledSandbox> {
    await this.start(session, lease);
    return { session, hostPublicKey: 'fake' };
  }

  async claim(pooled: PooledSandbox): Promise<void> {
    this.claims.push(pooled.session.id);
    if (this.claimError) throw this.claimError;
    attachFakeDesktop(pooled.session);
  }

  watch(session: Session): SandboxWatch | undefined {
    let found: SandboxGone | undefined;
    const gone = new Promise<SandboxGone>((resolve) =>
      this.watches.set(session.id, (g) => {
        found = g;
        resolve(g);
      }),
    );
    return { gone, check: async () => found, stop: () => this.watches.delete(session.id) };
  }

  /** What the watch sees when a sandbox's network is deleted from under it. */
  vanish(sessionId: string, reason = 'its network namespace was deleted'): void {
    this.watches.get(sessionId)?.({ reason, processExited: false });
  }

  async consoleTail(): Promise<string> {
    return '';
  }

  async adopt(record: SessionRecord): Promise<Session | undefined> {
    const found = await this.runtime.adopt(record.id);
    if (!found) return undefined;
    const session = new Session(record);
    session.sandbox = found.sandbox;
    await session.cleanup.push('fake sandbox', () => found.release());
    // As adopt.ts does: a paused session is taken back paused, without a connection.
    if (record.state === 'paused' && (await this.runtime.isPaused(this.target(session)))) return session;
    attachFakeDesktop(session);
    return session;
  }

  async recover(adopted: readonly Session[]): Promise<number> {
    // As reconcile.ts does: every unfinished session not adopted is reclaimed, marked destroyed.
    const keep = new Set(adopted.map((s) => s.id));
    let reclaimed = 0;
    for (const record of this.store.unfinished()) {
      if (keep.has(record.id)) continue;
      await this.runtime.reclaim(record.id);
      this.store.update({ ...record, state: 'destroyed', addressIndex: null });
      reclaimed++;
    }
    return reclaimed;
  }

  pauseModes(): readonly PauseMode[] {
    return this.runtime.pauseModes();
  }

  pauseUnavailable(mode: PauseMode): string | undefined {
    return this.runtime.pauseUnavailable(mode);
  }

  pauseStateMaxMiB(memoryMiB: number): number | undefined {
    return this.runtime.pauseStateMaxMiB(memoryMiB);
  }

  diskPauseEndsConnection(): boolean {
    return this.runtime.capabilities.diskPauseEndsConnection === true;
  }

  diskPauseWithVolumes(): boolean {
    return this.runtime.diskPauseWithVolumes();
  }

  pause(session: Session, mode: PauseMode): Promise<PauseResult> {
    return this.runtime.pause(this.target(session), mode);
  }

  /** As host-sandboxes.ts does: a sandbox resumed from disk is the session's, released first. */
  async resume(session: Session, mode: PauseMode = 'memory'): Promise<void> {
    const resumed = await this.runtime.resume(this.target(session), mode);
    if (!resumed) return;
    session.sandbox = resumed.sandbox;
    await session.cleanup.push('resumed fake sandbox', () => resumed.release());
  }

  isPaused(session: Session): Promise<boolean> {
    return this.runtime.isPaused(this.target(session));
  }

  async attach(session: Session): Promise<void> {
    attachFakeDesktop(session);
  }

  private target(session: Session): PauseTarget {
    return { sessionId: session.id, sessionDir: `/nonexistent/${session.id}`, pid: process.pid };
  }

  stopPolicyGuard(): void {}

  async removePolicy(): Promise<void> {}

  private async start(session: Session, lease: AddressLease | undefined): Promise<void> {
    const { id, width, height } = session.record;
    session.sandbox = await this.runtime.start(
      {
        sessionId: id,
        image: session.image ?? FAKE_IMAGE,
        sessionDir: `/nonexistent/${id}`,
        configDir: `/nonexistent/${id}/config`,
        screen: { width, height },
        hostname: `sbx-${id}`,
        network: lease
          ? { netns: `fake-${id}`, netnsPath: `/nonexistent/fake-${id}`, hostInterface: `fake-${id}`, lease, attachment: 'veth' }
          : { attachment: 'none' },
        memoryMiB: 256,
        pidsLimit: 64,
        logsDir: '/nonexistent/logs',
        snapshot: session.fromSnapshot,
      },
      session.cleanup,
    );
  }

  /** The runtime's snapshot, if the test gave the fake runtime one. */
  async snapshot(session: Session, dir: string): Promise<void> {
    if (!this.runtime.snapshot) throw new Error('the fake runtime cannot snapshot');
    await this.runtime.snapshot(this.target(session), dir);
  }
}

/** A connection and desktop that are never opened: the state machine only needs them present. */
function attachFakeDesktop(session: Session): void {
  const { width, height, modelWidth, modelHeight } = session.record;
  const connection = new FakeTransport();
  session.connection = connection;
  session.computer = new ComputerTool(
    new Desktop(connection, 99, { width, height }),
    new Scaler({ width, height }, { width: modelWidth, height: modelHeight }),
    { maxMs: 0, intervalMs: 0 },
  );
}

export function silentLogger(): Logger {
  return pino({ level: 'silent' });
}
