import { setTimeout as sleep } from 'node:timers/promises';
import type { Logger } from 'pino';
import { parseAction } from '../computer/actions.js';
import type { ComputerOutcome, ComputerTool, SettleOptions } from '../computer/computer-tool.js';
import { modelSize, type ScalingRequest } from '../computer/scaling.js';
import { type GuestProtocolError, NotFoundError, OrchestratorError, SessionGoneError, SessionStateError, UnavailableError } from '../errors.js';
import { MAX_ID_RANGES } from '../config.js';
import type { GuestImage } from '../guest/image/builder.js';
import type { Metrics } from '../metrics/metrics.js';
import { AddressPool, type AddressLease } from '../network/address-pool.js';
import { run } from '../util/exec.js';
import type { ResourceNames } from '../network/names.js';
import { NetworkPolicy, type NetworkOptions } from '../network/policy/network-policy.js';
import { PolicyGuard } from '../network/policy/policy-guard.js';
import type { Runtime } from '../runtimes/runtime.js';
import type { ConsoleLogLimits } from '../runtimes/console-log.js';
import { adoptSession } from './adopt.js';
import { bootPooledSandbox, bootSandbox, consoleTail, type BootContext } from './boot.js';
import { claimPooledSandbox } from './pool/claim.js';
import { WarmPool, type PooledSandbox, type ScreenShape, type WarmPoolStatus } from './pool/warm-pool.js';
import { CapacityGate, defaultMaxSessions, type CapacitySlot } from './capacity.js';
import { reconcileHost } from './reconcile.js';
import { watchSandbox } from './sandbox-watch.js';
import { newSessionId, Session } from './session.js';
import { LOCAL_TENANT, type ComputerToolVersion, type EndReason, type SessionRecord, type SessionState } from './session-record.js';
import { changedLifetime, expiry, idleDeadline, resolveLifetime } from './timeouts.js';
import { toView, type SessionView } from './session-view.js';
import type { SessionStore } from './store.js';
import type { GuestConnection } from '../transport/ssh-connection.js';
import type { CleanupStack } from '../util/cleanup-stack.js';

export interface CreateSessionOptions {
  width?: number;
  height?: number;
  /** The model-facing screen size: 'auto' (default, as the reference), 'none', or a size. */
  scaling?: ScalingRequest;
  /** The computer-use tool version the session's tool definition declares. */
  toolVersion?: ComputerToolVersion;
  timeoutSeconds?: number;
  /** Hard end of the session, at most (and by default) the orchestrator's maximum. */
  maxLifetimeSeconds?: number;
  metadata?: Record<string, unknown>;
  /** The guest network policy: `egress` lets the sandbox reach the internet (default off). */
  network?: Partial<NetworkOptions>;
}

/** Who a session is made for. */
export interface SessionOwner {
  tenant: string;
}

export interface AttachmentContext {
  connection: GuestConnection;
  cleanup: CleanupStack;
}

export interface ManagerOptions {
  settle: SettleOptions;
  stateDir: string;
  names: ResourceNames;
  display: number;
  subnet: string;
  /** How often the network policy is checked and repaired (default 3 s). */
  networkPolicyCheckMs?: number;
  defaultTimeoutSeconds: number;
  /** The longest a session may live, and the lifetime of one that asks for none. */
  maxLifetimeSeconds: number;
  bootTimeoutMs: number;
  memoryMiB: number;
  pidsLimit: number;
  runtime: Runtime;
  image: GuestImage;
  store: SessionStore;
  metrics: Metrics;
  log: Logger;
  /** Booted sandboxes kept ready for creates of this screen size (size 0: no pool). */
  warmPool?: { size: number; shape: ScreenShape };
  /** Admission control (per host, per tenant, memory); default: limits derived from memoryMiB. */
  capacity?: CapacityGate;
  /** Console log caps (default DEFAULT_CONSOLE_LOG_LIMITS). */
  consoleLog?: ConsoleLogLimits;
}

export interface SessionHealth {
  state: SessionState;
  healthy: boolean;
  ssh: 'ok' | 'down';
  display: 'ok' | 'down';
  detail?: string;
}

const HEALTH_PROBE_TIMEOUT_MS = 3_000;

export interface ActionOutcome extends ComputerOutcome {
  durationMs: number;
}

/** Persist a moving expiry at most this often: an action must not pay a disk write. */
const EXPIRY_PERSIST_INTERVAL_MS = 30_000;
/** A pooled sandbox not ready for its new session within this is given up for a cold boot. */
const CLAIM_TIMEOUT_MS = 5_000;
const REAPER_INTERVAL_MS = 1_000;
/** How long a watch that saw a sandbox's process gone waits for the runtime to report its exit. */
const EXIT_REPORT_GRACE_MS = 2_500;
/** A transfer's flowing bytes touch the session at most this often. */
const TRANSFER_TOUCH_INTERVAL_MS = 1_000;

/** What a client may change on a live session (PATCH /v1/sessions/:id). */
export interface SessionTimeoutUpdate {
  timeoutSeconds?: number;
  maxLifetimeSeconds?: number;
}

/** A create request with its defaults applied and checked: the record's requested part. */
type SessionRequest = Pick<
  SessionRecord,
  'width' | 'height' | 'modelWidth' | 'modelHeight' | 'toolVersion' | 'timeoutSeconds' | 'maxLifetimeSeconds' | 'metadata' | 'egress'
>;

/**
 * The session lifecycle: creating -> ready -> destroying -> destroyed, or failed. Owns the
 * live sessions, their address leases, the idle-timeout reaper, and the start-up clean-up.
 */
export class SessionManager {
  private readonly sessions = new Map<string, Session>();
  private readonly pool: AddressPool;
  readonly policy: NetworkPolicy;
  /** Keeps the policy in force; creates are refused while it is not (policy-guard.ts). */
  readonly policyGuard: PolicyGuard;
  private reaper: NodeJS.Timeout | undefined;
  private shuttingDown = false;
  private readonly warmPool: WarmPool | undefined;
  readonly capacity: CapacityGate;

  constructor(private readonly opts: ManagerOptions) {
    this.capacity =
      opts.capacity ??
      new CapacityGate({ maxSessions: defaultMaxSessions(opts.memoryMiB), maxSessionsPerTenant: 10, sessionMemoryMiB: opts.memoryMiB, memoryReserveMiB: 512 });
    this.pool = new AddressPool(opts.subnet);
    this.policy = new NetworkPolicy(opts.names, opts.subnet, opts.log, opts.runtime.capabilities.hostOnlySources);
    this.policyGuard = new PolicyGuard(this.policy, {
      intervalMs: opts.networkPolicyCheckMs ?? 3_000,
      onRepair: () => opts.metrics.networkPolicyRepairs.inc(),
      log: opts.log.child({ part: 'network-policy' }),
    });
    const warm = opts.warmPool;
    if (warm && !opts.runtime.capabilities.configDirIsLive) {
      if (warm.size > 0) {
        opts.log.warn(
          { runtime: opts.runtime.name },
          'warm pool is off: it hands a sandbox to a new key through its live config dir, which this runtime does not have',
        );
      }
    } else if (warm) {
      this.warmPool = new WarmPool({
        size: warm.size,
        shape: warm.shape,
        metrics: opts.metrics,
        log: opts.log.child({ part: 'warm-pool' }),
        hooks: { boot: (shape) => this.bootPooled(shape), release: (pooled, reason) => this.releasePooled(pooled, reason) },
      });
    }
  }

  /** The warm pool as it is now (target 0 and nothing ready when there is none). */
  warmPoolStatus(): WarmPoolStatus {
    return this.warmPool?.status() ?? { target: 0, shape: this.opts.warmPool?.shape ?? { width: 1024, height: 768 }, ready: [], booting: 0 };
  }

  /** Changes how many sandboxes the warm pool keeps ready (the benchmark uses it). */
  async resizeWarmPool(size: number): Promise<void> {
    if (!this.warmPool) throw new Error('there is no warm pool (SBX_WARM_POOL_SIZE, or a runtime without a live config dir)');
    await this.warmPool.resize(size);
  }

  /**
   * The lowest free /30 whose addresses no host interface holds already: another
   * orchestrator given the same subnet, or a sandbox a killed process left behind, would
   * otherwise answer in its place. Blocks found taken stay out of this lease only.
   */
  private async leaseFreeBlock(): Promise<AddressLease> {
    const onHost = await hostIPv4Addresses();
    const skipped: number[] = [];
    try {
      for (;;) {
        const lease = this.pool.lease(); // throws once the subnet is exhausted
        if (!onHost.has(lease.gateway) && !onHost.has(lease.guest)) return lease;
        skipped.push(lease.index);
        this.opts.log.warn({ gateway: lease.gateway }, 'an address of the sandbox subnet is already on a host interface; skipping its block');
      }
    } finally {
      for (const index of skipped) this.pool.release(index);
    }
  }

  /** Address blocks leased now (sessions and pooled sandboxes): a leak shows here. */
  get leasesInUse(): number {
    return this.pool.inUse;
  }

  get runtimeName(): Runtime['name'] {
    return this.opts.runtime.name;
  }

  /** The X display number inside every guest. */
  get display(): number {
    return this.opts.display;
  }

  /**
   * Adopts the sessions an earlier run left ready whose sandboxes still run and answer,
   * reclaims everything else it left behind, then starts the reaper.
   */
  async start(): Promise<void> {
    const adopted = await this.adoptLive();
    const reclaimed = await reconcileHost({
      stateDir: this.opts.stateDir,
      names: this.opts.names,
      runtime: this.opts.runtime,
      store: this.opts.store,
      policy: this.policy,
      log: this.opts.log,
      keep: new Set(adopted.map((s) => s.id)),
    });
    // Reconciliation put a fresh policy table in place: admit adopted sessions again.
    for (const session of adopted) {
      if (session.record.addressIndex === null) continue;
      const lease = this.pool.describe(session.record.addressIndex);
      await this.policy.admit(session.id, lease, { egress: session.record.egress }, session.cleanup, this.sessionLog(session));
    }
    this.policyGuard.start();
    if (adopted.length > 0) this.opts.log.info({ adopted: adopted.length }, 'adopted live sessions of an earlier run');
    if (reclaimed > 0) this.opts.log.warn({ reclaimed }, 'reclaimed sandboxes left behind by an earlier run');
    this.reaper = setInterval(() => this.reapExpired(), REAPER_INTERVAL_MS);
    this.reaper.unref();
    this.warmPool?.start();
  }

  /** Every session the store says is ready whose sandbox can be taken back (adopt.ts). */
  private async adoptLive(): Promise<Session[]> {
    const adopted: Session[] = [];
    for (const record of this.opts.store.unfinished()) {
      // A pooled sandbox is not adopted: its pool key would have to be trusted again.
      if (record.state !== 'ready' || record.pooled) continue;
      const session = await adoptSession(record, {
        stateDir: this.opts.stateDir,
        names: this.opts.names,
        runtime: this.opts.runtime,
        pool: this.pool,
        display: this.opts.display,
        settle: this.opts.settle,
        log: this.opts.log,
        consoleLog: this.opts.consoleLog,
      });
      if (!session) continue;
      // A live session holds its place whatever the limits are now: it is running already.
      const slot = this.capacity.hold(record.tenant);
      await session.cleanup.push('capacity slot', () => slot.release());
      this.sessions.set(session.id, session);
      this.opts.metrics.activeSessions.inc();
      this.watch(session, this.sessionLog(session));
      adopted.push(session);
    }
    return adopted;
  }

  async create(options: CreateSessionOptions = {}, owner: SessionOwner = { tenant: LOCAL_TENANT }): Promise<SessionView> {
    if (this.shuttingDown) throw new UnavailableError('the orchestrator is shutting down');
    const started = performance.now();
    const request = this.resolve(options);
    await this.policyGuard.assertInForce();
    // Admission: a 429/503 here has taken nothing. The slot is taken in the same synchronous
    // step as the check, so concurrent creates cannot overshoot a limit. The session that
    // gets it releases it last of all its resources; a create that fails gives it back
    // (release is idempotent, so a failed boot that released it already is no harm).
    const slot = this.capacity.reserve(owner.tenant);
    try {
      const view = await this.createWithSlot(request, owner.tenant, slot, started);
      slot.booted();
      return view;
    } catch (err) {
      slot.release();
      throw err;
    }
  }

  private async createWithSlot(request: SessionRequest, tenant: string, slot: CapacitySlot, started: number): Promise<SessionView> {
    // A pooled sandbox of the same screen size, if one is ready; any other request boots cold.
    // (A pooled sandbox was fenced without egress: a request for egress boots cold too.)
    const pooled = request.egress ? undefined : this.warmPool?.take({ width: request.width, height: request.height });
    if (pooled) {
      const view = await this.createFromPool(pooled, request, tenant, slot, started).finally(() => this.warmPool?.refill());
      if (view) return view;
    }
    return this.createCold(request, tenant, slot, started);
  }

  /** Defaults applied and checked before anything is taken: a bad request leaves nothing to undo. */
  private resolve(options: CreateSessionOptions): SessionRequest {
    const width = options.width ?? 1024;
    const height = options.height ?? 768;
    const model = modelSize({ width, height }, options.scaling ?? 'auto');
    return {
      width,
      height,
      modelWidth: model.width,
      modelHeight: model.height,
      toolVersion: options.toolVersion ?? 'computer_20250124',
      timeoutSeconds: options.timeoutSeconds ?? this.opts.defaultTimeoutSeconds,
      // Checked here, before anything is taken: over the maximum is a 400, not a silent cut.
      maxLifetimeSeconds: resolveLifetime(options.maxLifetimeSeconds, this.opts.maxLifetimeSeconds),
      metadata: options.metadata ?? {},
      egress: options.network?.egress ?? false,
    };
  }

  private newRecord(request: SessionRequest, addressIndex: number, pooled: boolean, tenant: string): SessionRecord {
    const now = new Date();
    return {
      id: newSessionId(),
      tenant,
      state: 'creating',
      runtime: this.opts.runtime.name,
      ...request,
      createdAt: now.toISOString(),
      updatedAt: now.toISOString(),
      expiresAt: idleDeadline({ createdAt: now.toISOString(), maxLifetimeSeconds: request.maxLifetimeSeconds, timeoutSeconds: request.timeoutSeconds }, now.getTime()),
      addressIndex,
      error: null,
      pooled,
      endReason: null,
    };
  }

  private bootContext(log: Logger): BootContext {
    return {
      settle: this.opts.settle,
      stateDir: this.opts.stateDir,
      names: this.opts.names,
      display: this.opts.display,
      runtime: this.opts.runtime,
      image: this.opts.image,
      memoryMiB: this.opts.memoryMiB,
      pidsLimit: this.opts.pidsLimit,
      policy: this.policy,
      ledger: (sessionId, kind, name) => this.opts.store.recordResource(sessionId, kind, name),
      // As many ranges as this orchestrator can have sandboxes, with the warm pool's.
      leaseIdRange: (sessionId, base, size) => this.opts.store.leaseIdRange(sessionId, base, size, MAX_ID_RANGES),
      deadline: Date.now() + this.opts.bootTimeoutMs,
      log,
      consoleLog: this.opts.consoleLog,
    };
  }

  private async createCold(request: SessionRequest, tenant: string, slot: CapacitySlot, started: number): Promise<SessionView> {
    const lease = await this.leaseFreeBlock();
    const record = this.newRecord(request, lease.index, false, tenant);
    const session = new Session(record);
    const log = this.sessionLog(session);
    // Stored before any resource is taken, so a crash from here on is found at restart.
    this.opts.store.insert(record);
    this.sessions.set(record.id, session);
    this.opts.metrics.activeSessions.inc();
    // First on the stack, so released last: the slot is free only once everything else is.
    await session.cleanup.push('capacity slot', () => slot.release());
    await session.cleanup.push('address lease', () => this.pool.release(lease.index));

    const boot = bootSandbox(session, lease, this.bootContext(log));
    session.creation = boot.catch(() => undefined);
    try {
      await boot;
    } catch (err) {
      const tail = await consoleTail(session);
      const reason = (err as Error).message;
      log.error({ err, console: tail }, 'sandbox failed to start');
      this.opts.metrics.errors.inc({ kind: 'create' });
      await this.releaseResources(session, 'failed', `failed to start: ${reason}`);
      if (err instanceof OrchestratorError) throw err;
      throw new UnavailableError(`sandbox failed to start: ${reason}${tail ? `\n--- guest console (last lines) ---\n${tail}` : ''}`);
    }
    return this.becomeReady(session, 'cold', started, log);
  }

  /**
   * A session from a pooled sandbox: the request's settings are applied, then the sandbox is
   * handed to the session's own key (claimPooledSandbox). Undefined if the claim failed: the
   * pooled sandbox is destroyed and the caller boots one cold, so the client never sees it.
   */
  private async createFromPool(
    pooled: PooledSandbox,
    request: SessionRequest,
    tenant: string,
    slot: CapacitySlot,
    started: number,
  ): Promise<SessionView | undefined> {
    const { session } = pooled;
    const now = new Date();
    Object.assign(session.record, {
      tenant,
      state: 'creating',
      // The request's screen is the pool's (only a matching request takes a pooled sandbox).
      ...request,
      // Its clocks start at the claim: the time it spent in the pool is not the client's.
      createdAt: now.toISOString(),
      updatedAt: now.toISOString(),
      expiresAt: idleDeadline({ createdAt: now.toISOString(), maxLifetimeSeconds: request.maxLifetimeSeconds, timeoutSeconds: request.timeoutSeconds }, now.getTime()),
      pooled: false,
      endReason: null,
    } satisfies Partial<SessionRecord>);
    const log = this.sessionLog(session);
    // From here it is a session like any other: listed, destroyed by a DELETE or a shutdown.
    this.opts.store.adopt(session.record);
    this.sessions.set(session.id, session);
    this.opts.metrics.activeSessions.inc();
    const claim = claimPooledSandbox(pooled, {
      stateDir: this.opts.stateDir,
      display: this.opts.display,
      settle: this.opts.settle,
      timeoutMs: CLAIM_TIMEOUT_MS,
    });
    session.creation = claim.catch(() => undefined);
    try {
      await claim;
    } catch (err) {
      this.opts.metrics.errors.inc({ kind: 'warm_claim' });
      // A destroy (or shutdown) that came meanwhile owns the release.
      if (session.record.state !== 'creating') throw new UnavailableError(`session ${session.id} was destroyed while it was being created`);
      log.warn({ err }, 'could not claim a warm sandbox; destroying it and booting one cold');
      this.sessions.delete(session.id);
      this.opts.metrics.activeSessions.dec();
      try {
        await session.cleanup.run();
      } catch (releaseErr) {
        this.opts.metrics.errors.inc({ kind: 'destroy' });
        log.error({ err: releaseErr }, 'releasing a warm sandbox that could not be claimed failed');
      }
      this.opts.store.delete(session.id);
      return undefined; // the slot was not on its stack: the cold boot that follows uses it
    }
    // Only now, so that a failed claim above does not give back the slot the cold boot needs.
    await session.cleanup.push('capacity slot', () => slot.release());
    return this.becomeReady(session, 'warm', started, log);
  }

  private becomeReady(session: Session, source: 'warm' | 'cold', started: number, log: Logger): SessionView {
    const { record } = session;
    if (record.state !== 'creating') {
      // Destroyed while it was booting: the destroy has released it already.
      throw new UnavailableError(`session ${record.id} was destroyed while it was being created`);
    }
    this.watch(session, log);
    this.setState(session, 'ready');
    const seconds = (performance.now() - started) / 1000;
    this.opts.metrics.sessionsTotal.inc({ outcome: 'ready' });
    this.opts.metrics.createsTotal.inc({ source });
    this.opts.metrics.createDuration.observe({ runtime: record.runtime }, seconds);
    const accel = session.sandbox?.accelerator;
    if (accel && source === 'cold') this.opts.metrics.vmBootDuration.observe({ runtime: record.runtime, accel }, seconds);
    log.info({ runtime: record.runtime, source, ms: Math.round(seconds * 1000) }, 'session ready');
    return toView(record);
  }

  /** One sandbox for the warm pool: stored (so a restart reclaims it), booted, known ready. */
  private async bootPooled(shape: ScreenShape): Promise<PooledSandbox> {
    if (this.shuttingDown) throw new UnavailableError('the orchestrator is shutting down');
    const request = this.resolve(shape);
    const lease = await this.leaseFreeBlock();
    // Owned by no tenant until a create claims it (and not counted against any limit).
    const record = this.newRecord(request, lease.index, true, LOCAL_TENANT);
    const session = new Session(record);
    const log = this.opts.log.child({ pooledSandbox: record.id });
    this.opts.store.insert(record);
    await session.cleanup.push('address lease', () => this.pool.release(lease.index));
    try {
      const keys = await bootPooledSandbox(session, lease, this.bootContext(log));
      this.setState(session, 'ready');
      return { session, hostPublicKey: keys.hostPublicKey };
    } catch (err) {
      await this.releasePooled({ session, hostPublicKey: '' }, 'it failed to boot');
      throw err;
    }
  }

  private async releasePooled(pooled: PooledSandbox, reason: string): Promise<void> {
    const { session } = pooled;
    this.opts.log.debug({ pooledSandbox: session.id, reason }, 'warm pool: destroying a pooled sandbox');
    try {
      await session.cleanup.run();
      this.opts.store.forgetResources(session.id);
      this.opts.store.delete(session.id);
    } catch (err) {
      // Its row and ledger stay: the next start-up reclaims what is left.
      this.opts.metrics.errors.inc({ kind: 'destroy' });
      this.opts.log.error({ err, pooledSandbox: session.id }, 'releasing a pooled sandbox failed');
    }
  }

  /** Live sessions; only `tenant`'s when given. */
  list(tenant?: string): SessionView[] {
    const sessions = [...this.sessions.values()].filter((s) => tenant === undefined || s.record.tenant === tenant);
    return sessions.map((s) => toView(s.record));
  }

  /** The tenant that owns a session (live or stored), or undefined if there is none. */
  tenantOf(id: string): string | undefined {
    return this.sessions.get(id)?.record.tenant ?? this.opts.store.get(id)?.tenant;
  }

  get(id: string): SessionView {
    const live = this.sessions.get(id);
    if (live) return toView(live.record);
    const stored = this.opts.store.get(id);
    if (!stored) throw new NotFoundError(`session ${id} does not exist`);
    return toView(stored);
  }

  /** Destroys a session and releases everything it holds, recording why. Idempotent. */
  async destroy(id: string, reason: EndReason = 'deleted'): Promise<SessionView> {
    const session = this.sessions.get(id);
    if (!session) return this.get(id); // already destroyed (or unknown: 404)
    // The first reason stands: a DELETE racing the reaper does not rewrite why it ended.
    session.record.endReason ??= reason;
    if (session.record.state === 'creating') {
      // Let the boot reach a resting point, so its releases are all on the stack.
      this.setState(session, 'destroying');
      await session.creation;
    }
    await this.releaseResources(session, 'destroyed', session.record.error);
    return toView(session.record);
  }

  /**
   * Probes a live session now: is its SSH connection up, does its display answer? A dead
   * display is reported here (and as a clear error by every action), never as a hang.
   */
  async health(id: string): Promise<SessionHealth> {
    const session = this.sessions.get(id);
    if (!session) {
      const stored = this.opts.store.get(id);
      if (!stored) throw new NotFoundError(`session ${id} does not exist`);
      return { state: stored.state, healthy: false, ssh: 'down', display: 'down', detail: `session is ${stored.state}` };
    }
    const { state } = session.record;
    if (state !== 'ready' || !session.computer || !session.connection) {
      return { state, healthy: false, ssh: 'down', display: 'down', detail: `session is ${state}` };
    }
    try {
      await session.computer.probeDisplay(HEALTH_PROBE_TIMEOUT_MS);
      return { state, healthy: true, ssh: 'ok', display: 'ok' };
    } catch (err) {
      const ssh = session.connection.isConnected ? 'ok' : 'down';
      return { state, healthy: false, ssh, display: 'down', detail: (err as Error).message };
    }
  }

  /** A PNG of the whole screen: at its real size, or as the model sees it when `scaled`. */
  async screenshot(id: string, scaled = false): Promise<Buffer> {
    const session = this.ready(id);
    const computer = session.computer as ComputerTool;
    const end = this.opts.metrics.screenshotDuration.startTimer();
    try {
      const png = scaled ? await computer.screenshot() : await computer.fullScreenshot();
      end();
      this.touch(session);
      return png;
    } catch (err) {
      this.opts.metrics.errors.inc({ kind: 'screenshot' });
      throw err;
    }
  }

  /**
   * Performs one computer-use action. With `screenshotAfter`, actions other than
   * screenshot, cursor_position and zoom also return the settled screen (the tool_result).
   */
  async act(id: string, input: unknown, options: { screenshotAfter: boolean }): Promise<ActionOutcome> {
    const session = this.ready(id);
    const computer = session.computer as ComputerTool;
    const action = parseAction(input, computer.scaler);
    const started = performance.now();
    try {
      // A long action (hold_key, wait, a settle) holds the idle timeout off while it runs.
      const outcome = await this.whileBusy(id, () => computer.run(action, options));
      const seconds = (performance.now() - started) / 1000;
      this.opts.metrics.actionDuration.observe({ action: action.action }, seconds);
      if (action.action === 'screenshot') this.opts.metrics.screenshotDuration.observe(seconds);
      this.touch(session);
      return { ...outcome, durationMs: seconds * 1000 };
    } catch (err) {
      this.opts.metrics.errors.inc({ kind: 'action' });
      throw err;
    }
  }

  /**
   * "Still here": moves the idle deadline to now + the idle timeout (first set to
   * `timeoutSeconds` when given), never past the lifetime's end.
   */
  keepalive(id: string, timeoutSeconds?: number): SessionView {
    return this.updateTimeouts(id, timeoutSeconds === undefined ? {} : { timeoutSeconds });
  }

  /**
   * Changes a live session's idle timeout and/or lifetime (within the orchestrator's
   * maximum); counts as activity. Stored at once: the client was told its new deadline.
   */
  updateTimeouts(id: string, update: SessionTimeoutUpdate): SessionView {
    const session = this.ready(id);
    const record = session.record;
    const now = Date.now();
    // Checked before anything changes: a rejected update changes nothing.
    const lifetime = update.maxLifetimeSeconds === undefined ? record.maxLifetimeSeconds : changedLifetime(record, update.maxLifetimeSeconds, this.opts.maxLifetimeSeconds, now);
    record.maxLifetimeSeconds = lifetime;
    if (update.timeoutSeconds !== undefined) record.timeoutSeconds = update.timeoutSeconds;
    record.expiresAt = idleDeadline(record, now);
    session.expiryPersistedAt = now;
    record.updatedAt = new Date(now).toISOString();
    this.opts.store.update(record);
    return toView(record);
  }

  /**
   * For a transfer in progress: a function to call as its bytes flow, which counts as
   * activity (at most once a second). A stalled transfer stops calling it, and the idle
   * timeout runs again: a client that stops reading does not keep a sandbox forever.
   */
  transferActivity(id: string): () => void {
    const session = this.sessions.get(id);
    let last = 0;
    return () => {
      const now = Date.now();
      if (!session || now - last < TRANSFER_TOUCH_INTERVAL_MS || session.record.state !== 'ready') return;
      last = now;
      this.touch(session);
    };
  }

  /**
   * Runs a request's work with the session marked busy: a long action or tool call (a bash
   * command, hold_key, wait) is not cut by the idle timeout while it runs, and its end
   * counts as activity. The lifetime still applies. An unknown session just runs the work,
   * which reports it.
   */
  async whileBusy<T>(id: string, work: () => Promise<T>): Promise<T> {
    const session = this.sessions.get(id);
    if (!session) return work();
    session.inFlight++;
    try {
      return await work();
    } finally {
      session.inFlight--;
      if (session.record.state === 'ready') this.touch(session);
    }
  }

  /**
   * A ready session's SSH connection, for the companion tools and files. Counts as activity.
   */
  connection(id: string): GuestConnection {
    const session = this.ready(id);
    this.touch(session);
    return session.connection as GuestConnection;
  }

  /**
   * Per-session state of a companion tool (e.g. a persistent shell), made on first use. What
   * `create` pushes onto the cleanup stack is released when the session ends, before its
   * SSH connection closes.
   */
  async attachment<T>(id: string, name: string, create: (ctx: AttachmentContext) => Promise<T> | T): Promise<T> {
    const session = this.ready(id);
    this.touch(session);
    if (!session.attachments.has(name)) {
      // Stored as a promise at once, so two concurrent first uses make only one.
      const made = Promise.resolve().then(() => create({ connection: session.connection as GuestConnection, cleanup: session.cleanup }));
      made.catch(() => session.attachments.delete(name)); // a failed start is retried next time
      session.attachments.set(name, made);
    }
    return (await session.attachments.get(name)) as T;
  }

  /** Destroys every session and every pooled sandbox (SIGTERM, tests). */
  async shutdown(): Promise<void> {
    this.shuttingDown = true;
    if (this.reaper) clearInterval(this.reaper);
    this.policyGuard.stop();
    await Promise.allSettled([this.warmPool?.stop(), ...[...this.sessions.keys()].map((id) => this.destroy(id, 'shutdown'))]);
    // Every session is gone: so goes the policy table (no rules left behind by a clean stop).
    await this.policy.uninstall().catch((err: unknown) => this.opts.log.error({ err, table: this.policy.table }, 'could not remove the network policy table'));
  }

  private ready(id: string): Session {
    const session = this.sessions.get(id);
    if (!session) {
      const stored = this.opts.store.get(id);
      if (!stored) throw new NotFoundError(`session ${id} does not exist`);
      if (stored.state === 'failed') throw new SessionGoneError(`session ${id} is gone${stored.error ? `: ${stored.error}` : ''}`);
      throw new SessionStateError(`session ${id} is ${stored.state}${stored.error ? `: ${stored.error}` : ''}`);
    }
    if (session.record.state === 'failed' || (session.record.state === 'destroying' && session.record.endReason === 'failed')) {
      throw new SessionGoneError(`session ${id} is gone${session.record.error ? `: ${session.record.error}` : ''}`);
    }
    if (session.record.state !== 'ready' || !session.computer) {
      throw new SessionStateError(`session ${id} is ${session.record.state}, not ready`);
    }
    return session;
  }

  /** Activity moves the idle deadline; it reaches the store at most every 30 s. */
  private touch(session: Session): void {
    const now = Date.now();
    session.record.expiresAt = idleDeadline(session.record, now);
    if (now - session.expiryPersistedAt > EXPIRY_PERSIST_INTERVAL_MS) {
      session.expiryPersistedAt = now;
      this.opts.store.update(session.record);
    }
  }

  /**
   * A sandbox that dies by itself, or whose network is deleted from under it, marks its
   * session failed and gives back what it held, within about a second (sandbox-watch.ts).
   */
  private watch(session: Session, log: Logger): void {
    const sandbox = session.sandbox;
    if (sandbox) {
      const watch = watchSandbox({ pid: sandbox.pid, netns: this.opts.names.netns(session.id), hostVeth: this.opts.names.hostVeth(session.id) });
      session.watch = watch;
      void watch.gone.then(async (gone) => {
        // A process that died is the runtime's to describe (its exit status, where its console
        // log was kept): give its `exited` a moment to say so first.
        if (gone.processExited) await Promise.race([sandbox.exited, sleep(EXIT_REPORT_GRACE_MS)]);
        this.sandboxVanished(session, log, `sandbox vanished: ${gone.reason}`);
      });
      void sandbox.exited.then((info) => this.sandboxVanished(session, log, `sandbox stopped unexpectedly: ${info.reason}`));
    }
    session.connection?.on('reconnected', () => this.opts.metrics.sshReconnects.inc());
    session.connection?.on('guest_protocol_error', (err: GuestProtocolError) => {
      log.warn({ channel: err.channel, reason: err.reason, detail: err.message }, 'guest broke a protocol; its channel was closed');
      this.opts.metrics.guestProtocolErrors.inc({ channel: err.channel, reason: err.reason });
    });
  }

  private sandboxVanished(session: Session, log: Logger, reason: string): void {
    if (session.record.state !== 'ready') return;
    // Set now, so that requests during the release are told it is gone (410), not busy.
    session.record.endReason = 'failed';
    log.warn({ reason }, 'the sandbox of a ready session is gone: marking it failed');
    this.opts.metrics.errors.inc({ kind: 'sandbox_exit' });
    void this.releaseResources(session, 'failed', reason);
  }

  /**
   * What a request on session `id` that failed unexpectedly (not with an OrchestratorError)
   * should answer instead of a 500, if the session ended under it: 410 when its sandbox
   * vanished (looked at now, not at the next tick of the watch), 409 when it is being
   * destroyed. Undefined when the session is live and well: the error is a real one.
   */
  async endedUnderRequest(id: string): Promise<OrchestratorError | undefined> {
    const session = this.sessions.get(id);
    if (!session) return undefined;
    if (session.record.state === 'ready') {
      const gone = await session.watch?.check();
      if (!gone) return undefined;
      // The watch's `gone` settles with it, and the session is failed and released from there.
      return new SessionGoneError(`session ${id} is gone: sandbox vanished: ${gone.reason}`);
    }
    if (session.record.endReason === 'failed' || session.record.state === 'failed') {
      return new SessionGoneError(`session ${id} is gone${session.record.error ? `: ${session.record.error}` : ''}`);
    }
    return new SessionStateError(`session ${id} is ${session.record.state}`);
  }

  private releaseResources(session: Session, final: 'destroyed' | 'failed', error: string | null): Promise<void> {
    session.release ??= (async () => {
      session.watch?.stop();
      if (session.record.state !== 'destroying') this.setState(session, 'destroying');
      try {
        await session.cleanup.run();
        // All released: the ledger has nothing left to say. (After a failure it keeps its
        // records, and the next start-up reclaims what they name.)
        this.opts.store.forgetResources(session.id);
      } catch (err) {
        this.opts.metrics.errors.inc({ kind: 'destroy' });
        this.sessionLog(session).error({ err }, 'releasing sandbox resources failed');
      }
      session.record.addressIndex = null;
      session.record.error = error;
      if (final === 'failed') session.record.endReason ??= 'failed';
      this.setState(session, final);
      this.opts.metrics.activeSessions.dec();
      this.opts.metrics.sessionsTotal.inc({ outcome: final });
      // A failed session stays listed (with its error) until it is destroyed.
      if (final === 'destroyed') this.sessions.delete(session.id);
    })();
    return session.release.then(() => {
      // Destroying a failed session only records that the client is done with it.
      if (final === 'destroyed' && session.record.state === 'failed') {
        this.setState(session, 'destroyed');
        this.sessions.delete(session.id);
      }
    });
  }

  /** Every log line about a session carries its id and its tenant. */
  private sessionLog(session: Session): Logger {
    return this.opts.log.child({ sessionId: session.id, tenant: session.record.tenant });
  }

  private setState(session: Session, state: SessionState): void {
    session.record.state = state;
    session.record.updatedAt = new Date().toISOString();
    this.opts.store.update(session.record);
  }

  private reapExpired(): void {
    const now = Date.now();
    for (const session of this.sessions.values()) {
      if (session.record.state !== 'ready' && session.record.state !== 'failed') continue;
      const reason = expiry(session.record, now, session.inFlight > 0);
      if (!reason) continue;
      this.sessionLog(session).info({ reason }, `session ${reason === 'max_lifetime' ? 'maximum lifetime' : 'idle timeout'} reached; destroying`);
      void this.destroy(session.id, reason);
    }
  }
}

/**
 * Every IPv4 address on the host's interfaces, up or down (os.networkInterfaces() lists only
 * interfaces that are up and running: a leftover veth whose peer is gone would be missed).
 */
async function hostIPv4Addresses(): Promise<Set<string>> {
  const { stdout } = await run(['ip', '-o', '-4', 'addr', 'show']);
  return new Set([...stdout.matchAll(/\binet (\d+\.\d+\.\d+\.\d+)\//g)].map((m) => m[1] as string));
}
