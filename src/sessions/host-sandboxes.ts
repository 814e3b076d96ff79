import type { Logger } from 'pino';
import type { SettleOptions } from '../computer/computer-tool.js';
import type { GuestImage } from '../guest/image/builder.js';
import type { Metrics } from '../metrics/metrics.js';
import type { AddressAllocator } from '../network/address-allocator.js';
import type { AddressLease } from '../network/address-pool.js';
import type { ResourceNames } from '../network/names.js';
import type { NetworkPolicy } from '../network/policy/network-policy.js';
import type { PolicyGuard } from '../network/policy/policy-guard.js';
import type { ConsoleLogLimits } from '../runtimes/console-log.js';
import type { Runtime } from '../runtimes/runtime.js';
import path from 'node:path';
import type { PauseMode, PauseResult, PauseTarget } from '../runtimes/runtime.js';
import { publicKeyBlob, readSessionKeys } from '../transport/ssh-keys.js';
import { templateDisplay } from './templates.js';
import { GUEST_SSH_PORT } from '../guest/contract.js';
import { adoptSession } from './adopt.js';
import { attachDesktop, bootPooledSandbox, bootSandbox, consoleTail, sessionDirOf, type BootContext } from './boot.js';
import { claimPooledSandbox } from './pool/claim.js';
import type { PooledSandbox } from './pool/warm-pool.js';
import { reconcileHost } from './reconcile.js';
import type { SandboxHost } from './sandbox-host.js';
import { watchSandbox, type SandboxWatch } from './sandbox-watch.js';
import type { Session } from './session.js';
import type { ControlTransport, SessionRecord } from './session-record.js';
import type { SessionStore } from './store.js';

/** A pooled sandbox not ready for its new session within this is given up for a cold boot. */
const CLAIM_TIMEOUT_MS = 5_000;

export interface HostSandboxOptions {
  settle: SettleOptions;
  /** How long a dropped SSH connection is retried before its session fails. */
  sshReconnectGiveUpMs?: number;
  stateDir: string;
  names: ResourceNames;
  display: number;
  bootTimeoutMs: number;
  memoryMiB: number;
  pidsLimit: number;
  runtime: Runtime;
  image: GuestImage;
  store: SessionStore;
  addresses: AddressAllocator;
  policy: NetworkPolicy;
  policyGuard: PolicyGuard;
  log: Logger;
  consoleLog?: ConsoleLogLimits;
  /** Where a session directory left on disk is counted (sandbox_session_dirs_kept_total). */
  metrics?: Metrics;
}

/** The real SandboxHost: sandboxes booted on this host, as root (see sandbox-host.ts). */
export class HostSandboxes implements SandboxHost {
  constructor(private readonly opts: HostSandboxOptions) {}

  private readonly countKeptDir = (): void => this.opts.metrics?.sessionDirsKept.inc();

  get controlTransport(): ControlTransport {
    return this.opts.runtime.capabilities.controlTransport ?? 'tcp';
  }

  assertCreatesAllowed(): Promise<void> {
    return this.opts.policyGuard.assertInForce();
  }

  boot(session: Session, lease: AddressLease | undefined, log: Logger): Promise<void> {
    return bootSandbox(session, lease, this.bootContext(session, log));
  }

  async bootPooled(session: Session, lease: AddressLease | undefined, log: Logger): Promise<PooledSandbox> {
    const { keys, warm } = await bootPooledSandbox(session, lease, this.bootContext(session, log));
    return { session, hostPublicKey: keys.hostPublicKey, warmHelpers: warm };
  }

  claim(pooled: PooledSandbox): Promise<void> {
    const { stateDir, settle, sshReconnectGiveUpMs } = this.opts;
    return claimPooledSandbox(pooled, { stateDir, ...this.displayOf(pooled.session), settle, sshReconnectGiveUpMs, timeoutMs: CLAIM_TIMEOUT_MS });
  }

  watch(session: Session): SandboxWatch | undefined {
    const { sandbox } = session;
    if (!sandbox) return undefined;
    // A sandbox without a NIC has no netns or veth of ours to lose: only its process is watched.
    if (session.record.addressIndex === null) return watchSandbox({ pid: sandbox.pid });
    return watchSandbox({ pid: sandbox.pid, netns: this.opts.names.netns(session.id), hostVeth: this.opts.names.hostVeth(session.id) });
  }

  consoleTail(session: Session): Promise<string> {
    return consoleTail(session);
  }

  adopt(record: SessionRecord): Promise<Session | undefined> {
    const { stateDir, names, runtime, addresses, settle, sshReconnectGiveUpMs, log, consoleLog } = this.opts;
    const own = templateDisplay(record.template);
    return adoptSession(record, {
      stateDir,
      names,
      runtime,
      pool: addresses.pool,
      ...(own ? { display: own.number, displayServer: own.server } : { display: this.opts.display }),
      settle,
      sshReconnectGiveUpMs,
      log,
      consoleLog,
      countKeptDir: this.countKeptDir,
    });
  }

  async recover(adopted: readonly Session[]): Promise<number> {
    const { stateDir, names, runtime, store, policy, log } = this.opts;
    const reclaimed = await reconcileHost({
      stateDir,
      names,
      runtime,
      store,
      policy,
      log,
      keep: new Set(adopted.map((s) => s.id)),
      countKeptDir: this.countKeptDir,
    });
    // Reconciliation put a fresh policy table in place: admit adopted sessions again.
    for (const session of adopted) {
      if (session.record.addressIndex === null) continue;
      const lease = this.opts.addresses.describe(session.record.addressIndex);
      await policy.admit(
        session.id,
        lease,
        { egress: session.record.egress },
        session.cleanup,
        log.child({ sessionId: session.id, tenant: session.record.tenant }),
      );
    }
    this.opts.policyGuard.start();
    return reclaimed;
  }

  pauseModes(): readonly PauseMode[] {
    return this.opts.runtime.pauseModes?.() ?? [];
  }

  pauseUnavailable(mode: PauseMode): string | undefined {
    const { runtime } = this.opts;
    if (this.pauseModes().includes(mode)) return undefined;
    return runtime.pauseUnavailable?.(mode) ?? `the ${runtime.name} runtime cannot pause its sandboxes`;
  }

  pauseStateMaxMiB(memoryMiB: number): number | undefined {
    return this.opts.runtime.pauseStateMaxMiB?.(memoryMiB);
  }

  diskPauseEndsConnection(): boolean {
    return this.opts.runtime.capabilities.diskPauseEndsConnection === true;
  }

  diskPauseWithVolumes(): boolean {
    return this.opts.runtime.diskPauseWithVolumes?.() ?? false;
  }

  async pause(session: Session, mode: PauseMode): Promise<PauseResult> {
    const { runtime } = this.opts;
    if (!runtime.pause) throw new Error(`the ${runtime.name} runtime cannot pause its sandboxes`);
    return runtime.pause(this.pauseTarget(session), mode);
  }

  async resume(session: Session, mode: PauseMode): Promise<void> {
    const resumed = await this.opts.runtime.resume?.(this.pauseTarget(session), mode);
    if (!resumed) return;
    // From disk: a new process, stopped first on destroy (pushed last), before what the old one
    // held; a later resume's takes its place (the process before it is gone by then).
    session.sandbox = resumed.sandbox;
    await session.cleanup.replace(`resumed sandbox ${session.id}`, () => resumed.release());
  }

  async snapshot(session: Session, dir: string): Promise<void> {
    const { runtime } = this.opts;
    if (!runtime.snapshot) throw new Error(`the ${runtime.name} runtime cannot snapshot its sandboxes`);
    await runtime.snapshot(this.pauseTarget(session), dir);
  }

  async isPaused(session: Session): Promise<boolean> {
    return (await this.opts.runtime.isPaused?.(this.pauseTarget(session))) ?? false;
  }

  async attach(session: Session, timeoutMs: number): Promise<void> {
    const { sandbox } = session;
    if (!sandbox) throw new Error(`session ${session.id} has no sandbox to attach to`);
    const { stateDir, settle, sshReconnectGiveUpMs } = this.opts;
    const sessionDir = sessionDirOf(stateDir, session.id);
    const keys = await readSessionKeys(sessionDir, path.join(sessionDir, 'config'));
    // A VM under TCG answers a new SSH connection many times slower than a container.
    const deadline = Date.now() + Math.max(timeoutMs, this.opts.runtime.capabilities.bootTimeoutMs / 2);
    await attachDesktop(
      session,
      sandbox,
      keys.clientPrivateKey,
      publicKeyBlob(keys.hostPublicKey),
      deadline,
      { ...this.displayOf(session), settle, sshReconnectGiveUpMs },
      'background',
    );
  }

  /** The session's display: its template's own (xfce: :0, started by the session), else the orchestrator's (SBX_DISPLAY). */
  displayOf(session: Session): { display: number; displayServer: 'init' | 'session' } {
    const own = session.image?.display ?? templateDisplay(session.record.template);
    return own ? { display: own.number, displayServer: own.server } : { display: this.opts.display, displayServer: 'init' };
  }

  private pauseTarget(session: Session): PauseTarget {
    const { sandbox, record } = session;
    // One paused to disk and adopted by a restart has no sandbox yet: its address says where it will be.
    const lease = record.addressIndex === null ? undefined : this.opts.addresses.describe(record.addressIndex);
    const endpoint = sandbox?.endpoint ?? (lease && { host: lease.guest, port: GUEST_SSH_PORT });
    return { sessionId: session.id, sessionDir: sessionDirOf(this.opts.stateDir, session.id), pid: sandbox?.pid ?? 0, endpoint, lease };
  }

  stopPolicyGuard(): void {
    this.opts.policyGuard.stop();
  }

  async removePolicy(): Promise<void> {
    const { policy, log } = this.opts;
    await policy.uninstall().catch((err: unknown) => log.error({ err, table: policy.table }, 'could not remove the network policy table'));
  }

  private bootContext(session: Session, log: Logger): BootContext {
    // The session's template's image (lifecycle.ts resolved it); the default one otherwise.
    const image = session.image ?? this.opts.image;
    const { settle, sshReconnectGiveUpMs, stateDir, names, runtime, memoryMiB, pidsLimit, policy, store, consoleLog } = this.opts;
    return {
      steps: session.steps,
      settle,
      sshReconnectGiveUpMs,
      stateDir,
      names,
      ...this.displayOf(session),
      runtime,
      image,
      memoryMiB,
      pidsLimit,
      policy,
      ledger: (sessionId, kind, name) => store.recordResource(sessionId, kind, name),
      // As many ranges as this orchestrator can have sandboxes, with the warm pool's.
      leaseIdRange: (sessionId, base, size, count, takeHostWide) => store.leaseIdRange(sessionId, base, size, count, takeHostWide),
      deadline: Date.now() + this.opts.bootTimeoutMs,
      log,
      consoleLog,
      countKeptDir: this.countKeptDir,
    };
  }
}
