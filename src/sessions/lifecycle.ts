import { SESSION_ID_PATTERN } from '../network/names.js';
import type { Logger } from 'pino';
import { InvalidRequestError, OrchestratorError, UnavailableError } from '../errors.js';
import type { CapacitySlot } from './capacity.js';
import type { PooledSandbox, WarmPool } from './pool/warm-pool.js';
import { Session } from './session.js';
import { flushGuestVolumes, takeVolumes } from './session-volumes.js';
import { LOCAL_TENANT, transportFor, type EndReason, type SessionRecord, type SessionState } from './session-record.js';
import { newRecord, resolveRequest, startClocks, type CreateSessionOptions, type SessionOwner, type SessionRequest } from './session-request.js';
import { toView, type SessionView } from './session-view.js';
import type { SessionTemplate } from './templates.js';
import type { CreateAttempt, LifecycleOptions } from './lifecycle-options.js';
import { tenantDefaults } from './tenant-limits.js';
import { watchConnection, watchSandbox, watchSandboxProcess, type WatchHooks } from './session-watch.js';
import { StepTimes } from '../util/step-times.js';
import { forkRequest } from './session-fork.js';

export type { AddressSource, LifecycleOptions, SessionDisk } from './lifecycle-options.js';

/**
 * The session lifecycle: creating -> ready -> destroying -> destroyed, or failed. Creates (cold, or from the warm pool with a
 * cold fallback), destroys, and the release of all a session holds when it ends, however it ends (a DELETE, a clock, a
 * sandbox that vanished, a shutdown).
 */
export class SessionLifecycle {
  private shuttingDown = false;
  /** The warm pools, by template, once they exist (they are made with hooks into this lifecycle). */
  warmPools = new Map<string, WarmPool>();

  constructor(private readonly opts: LifecycleOptions) {}

  async create(options: CreateSessionOptions = {}, owner: SessionOwner = { tenant: LOCAL_TENANT }): Promise<SessionView> {
    if (this.shuttingDown) throw new UnavailableError('the orchestrator is shutting down');
    const fork = forkRequest(this.opts.snapshots, owner.tenant, options); // a fork: its snapshot held until it has started
    return fork ? this.createNew(fork.options, owner, fork.from).finally(() => fork.release()) : this.createNew(options, owner);
  }

  private async createNew(options: CreateSessionOptions, owner: SessionOwner, fork?: CreateAttempt['fork']): Promise<SessionView> {
    const started = performance.now();
    const steps = new StepTimes(started);
    const template = await this.template(options.template ?? this.opts.defaults.template);
    const request = resolveRequest(options, tenantDefaults(this.opts.defaults, this.opts.limits, owner.tenant), template.screen);
    if (owner.sessionId !== undefined) this.assertNewId(owner.sessionId);
    steps.mark('template');
    // Volumes first (a 404/409 takes nothing; session-volumes.ts). The session owns them once made.
    const volumes = takeVolumes(this.opts.volumes, { name: this.opts.runtimeName, volumes: this.opts.runtimeVolumes }, owner, request.volumes);
    owner = volumes.owner;
    try {
      // The network policy check (two processes), for a sandbox with a NIC (one without has nothing the policy fences): a
      // cold boot awaits it before it takes anything, a warm claim runs alongside it; no session is handed out before it passed.
      let checked: Promise<void> | undefined;
      const policy = (): Promise<void> => (checked ??= this.opts.host.assertCreatesAllowed());
      // Admission: a 429 here has taken nothing. The slot is taken in the same synchronous step as the check, so concurrent
      // creates cannot overshoot a limit. The session that gets it releases it last of all its resources; a create that
      // fails gives it back (release is idempotent, so a failed boot that released it already is no harm).
      const slot = this.opts.capacity.reserve(owner.tenant, { diskMiB: this.opts.disk?.writableMiB(template.image) ?? 0 });
      try {
        steps.mark('admission');
        const view = await this.createWithSlot({ request, template, owner, slot, started, volumes, steps, fork }, policy);
        slot.booted();
        return view;
      } catch (err) {
        slot.release();
        throw err;
      }
    } catch (err) {
      volumes.held?.release(); // not yet its session's (which gives them back itself)
      throw err;
    }
  }

  /** A placed id (a gateway's) is well formed and new on this node. */
  private assertNewId(id: string): void {
    if (!SESSION_ID_PATTERN.test(id)) throw new InvalidRequestError(`session id ${JSON.stringify(id)} is not a session id`);
    if (this.opts.registry.find(id) || this.opts.store.get(id)) throw new InvalidRequestError(`session ${id} exists already on this node`);
  }

  /** The template a create names, or a 400 that lists the ones there are (or the 503 of a damaged image). */
  private async template(name: string): Promise<SessionTemplate> {
    try {
      return await this.opts.templates.resolve(name);
    } catch (err) {
      if (err instanceof OrchestratorError) throw err;
      throw new InvalidRequestError(`template: ${err instanceof Error ? err.message : String(err)}`);
    }
  }

  /** Defaults applied and checked before anything is taken. */
  resolve(options: CreateSessionOptions): SessionRequest {
    return resolveRequest(options, this.opts.defaults);
  }

  /** Marks the start of a shutdown: creates are refused from now on. */
  beginShutdown(): void {
    this.shuttingDown = true;
  }

  get isShuttingDown(): boolean {
    return this.shuttingDown;
  }

  private async createWithSlot(attempt: CreateAttempt, policy: () => Promise<void>): Promise<SessionView> {
    const { request, owner, steps } = attempt;
    // A pooled sandbox of the same screen size, if one is ready; any other request boots cold.
    // (A pooled sandbox was fenced without egress: a request for egress boots cold too.)
    // Only the pool of the session's own template: a sandbox booted from another image is never handed out.
    const pool = this.warmPools.get(request.template);
    // A placed id names a cold boot (a pooled sandbox's resources carry its own id), unless the
    // gateway takes the pooled sandbox's id instead (docs/cluster.md, warm sandboxes).
    const placedOnly = owner.sessionId !== undefined && owner.pooledIdAccepted !== true;
    const pooled = request.egress || placedOnly || attempt.fork ? undefined : pool?.take({ width: request.width, height: request.height });
    if (pooled) {
      const view = await this.createFromPool(pooled, attempt, policy).finally(() => pool?.refill());
      if (view) return view;
    }
    // A cold boot takes an address (and a NIC) unless it is reached over a socket and not allowed out (createCold).
    if (this.opts.host.controlTransport === 'tcp' || request.egress) await policy();
    steps.mark('network policy check');
    return this.createCold(attempt);
  }

  private async createCold(attempt: CreateAttempt): Promise<SessionView> {
    const { request, template, owner, slot, started, volumes, steps } = attempt;
    const { store, registry, metrics, host, addresses } = this.opts;
    // Not allowed out, and reachable without a network: no interface, so no address either,
    // and its control channel is the runtime's socket. Otherwise TCP over its NIC.
    const lease = host.controlTransport !== 'tcp' && !request.egress ? undefined : await addresses.leaseFree();
    const record = newRecord(request, lease?.index ?? null, false, owner.tenant, this.opts.runtimeName, owner.sessionId);
    record.transport = transportFor(lease !== undefined, host.controlTransport);
    this.measureDisk(slot, record.id);
    const session = new Session(record);
    session.steps = steps;
    session.image = template.image;
    session.fromSnapshot = attempt.fork;
    record.snapshot = attempt.fork?.id ?? null;
    const log = this.sessionLog(session);
    // First on the stack, so released last: the slot is free only once everything else is.
    await session.cleanup.push('capacity slot', () => slot.release());
    if (lease) await session.cleanup.push('address lease', () => addresses.release(lease.index));
    // Stored before any other resource is taken, so a crash from here on is found at restart. An insert that throws (a
    // placed id's clash, a full disk) runs the stack: nothing else knows of the lease, which would stay taken until a restart.
    try {
      store.insert(record);
    } catch (err) {
      await session.cleanup.run();
      throw err;
    }
    session.volumes = volumes.held; // the session's once it is stored; until then the create's failure path gives them back
    volumes.held = undefined;
    registry.add(session);
    metrics.activeSessions.inc();

    const boot = host.boot(session, lease, log);
    session.creation = boot.catch(() => undefined);
    try {
      await boot;
    } catch (err) {
      const tail = await host.consoleTail(session);
      const reason = (err as Error).message;
      log.error({ err, console: tail }, 'sandbox failed to start');
      metrics.errors.inc({ kind: 'create' });
      await this.releaseResources(session, 'failed', `failed to start: ${reason}`);
      if (err instanceof OrchestratorError) throw err;
      throw new UnavailableError(`sandbox failed to start: ${reason}${tail ? `\n--- guest console (last lines) ---\n${tail}` : ''}`);
    }
    return this.becomeReady(session, 'cold', started, log);
  }

  /**
   * A session from a pooled sandbox: the request's settings applied, the sandbox handed to the session's own key (SandboxHost.claim).
   * Undefined if the claim failed: the pooled sandbox is destroyed and the caller boots one cold, so the client never sees it.
   */
  private async createFromPool(pooled: PooledSandbox, attempt: CreateAttempt, policy: () => Promise<void>): Promise<SessionView | undefined> {
    const { request, slot, started, steps } = attempt;
    const { tenant } = attempt.owner;
    const { store, registry, metrics } = this.opts;
    const { session } = pooled;
    this.measureDisk(slot, session.id);
    const now = new Date();
    Object.assign(session.record, {
      tenant,
      state: 'creating',
      // The request's screen is the pool's (only a matching request takes a pooled sandbox).
      ...request,
      // Its clocks start at the claim: the time it spent in the pool is not the client's.
      createdAt: now.toISOString(),
      updatedAt: now.toISOString(),
      expiresAt: startClocks(request, now),
      pooled: false,
      endReason: null,
      paused: null,
      pausedMs: 0,
    } satisfies Partial<SessionRecord>);
    const log = this.sessionLog(session);
    // From here it is a session like any other: listed, destroyed by a DELETE or a shutdown.
    store.claim(session.record);
    registry.add(session);
    metrics.activeSessions.inc();
    session.steps = steps; // the pool's boot is not this create's
    const claim = this.opts.host.claim(pooled);
    const fenced = session.record.addressIndex !== null ? policy() : Promise.resolve();
    session.creation = Promise.allSettled([claim, fenced]);
    try {
      await claim;
    } catch (err) {
      metrics.errors.inc({ kind: 'warm_claim' });
      log.warn({ err }, 'could not claim a warm sandbox; destroying it and booting one cold');
      await this.dropClaimed(session, log);
      return undefined; // the slot was not on its stack: the cold boot that follows uses it
    }
    await fenced.catch(async (err: unknown) => this.dropClaimed(session, log).then(() => Promise.reject(err))); // refused: no cold boot either
    steps.mark('network policy check (the rest)');
    // Only now, so that a failed claim above does not give back the slot the cold boot needs.
    await session.cleanup.push('capacity slot', () => slot.release());
    return this.becomeReady(session, 'warm', started, log);
  }

  /** Undoes a claim that did not make a session (the caller boots cold or refuses the create). */
  private async dropClaimed(session: Session, log: Logger): Promise<void> {
    // A destroy (or shutdown) that came meanwhile owns the release.
    if (session.record.state !== 'creating') throw new UnavailableError(`session ${session.id} was destroyed while it was being created`);
    this.opts.registry.remove(session.id);
    this.opts.metrics.activeSessions.dec();
    try {
      await session.cleanup.run();
      this.opts.store.forgetResources(session.id); // all released: its ledger too (else its id range stays taken)
    } catch (releaseErr) {
      this.opts.metrics.errors.inc({ kind: 'destroy' });
      log.error({ err: releaseErr }, 'releasing a warm sandbox that could not be claimed failed');
    }
    this.opts.store.delete(session.id);
  }

  private becomeReady(session: Session, source: 'warm' | 'cold', started: number, log: Logger): SessionView {
    const { record } = session;
    const { metrics } = this.opts;
    if (record.state !== 'creating') {
      // Destroyed while it was booting: the destroy has released it already.
      throw new UnavailableError(`session ${record.id} was destroyed while it was being created`);
    }
    this.watch(session, log);
    this.setState(session, 'ready');
    session.steps.mark('ready');
    const seconds = (performance.now() - started) / 1000;
    metrics.sessionsTotal.inc({ outcome: 'ready' });
    metrics.createsTotal.inc({ source });
    metrics.createDuration.observe({ runtime: record.runtime }, seconds);
    const accel = session.sandbox?.accelerator;
    if (accel && source === 'cold') metrics.vmBootDuration.observe({ runtime: record.runtime, accel }, seconds);
    log.info({ runtime: record.runtime, source, ms: Math.round(seconds * 1000), steps: session.steps.toJSON() }, 'session ready');
    return toView(record);
  }

  /** A session adopted alive from an earlier run joins the live ones (adopt.ts). */
  async admitAdopted(session: Session): Promise<void> {
    // A live session holds its place whatever the limits are now: it is running already.
    const slot = this.opts.capacity.hold(session.record.tenant, { diskMiB: this.opts.disk?.writableMiB(session.image) ?? 0 });
    this.measureDisk(slot, session.id);
    await session.cleanup.push('capacity slot', () => slot.release());
    // What it has mounted stays its own (no check: it is mounted already).
    if (session.record.volumes.length > 0) session.volumes = this.opts.volumes?.hold(session.record.tenant, session.id, session.record.volumes);
    this.opts.registry.add(session);
    this.opts.metrics.activeSessions.inc();
    // Adoption may have settled a pause that a crash left half done (adopt.ts): stored as it is now.
    this.opts.store.update(session.record);
    this.watch(session, this.sessionLog(session));
  }

  /** A session that cannot go on (a resume whose guest does not answer): failed and released. */
  fail(session: Session, reason: string): Promise<void> {
    session.record.endReason = 'failed';
    this.opts.metrics.errors.inc({ kind: 'sandbox_exit' });
    return this.releaseResources(session, 'failed', reason);
  }

  /** The slot's disk promise is reduced by what the session's files already hold. */
  private measureDisk(slot: CapacitySlot, sessionId: string): void {
    const disk = this.opts.disk;
    if (disk) slot.measureDisk(() => disk.usedMiB(sessionId));
  }

  /** Destroys a session and releases everything it holds, recording why. Idempotent. */
  async destroy(id: string, reason: EndReason = 'deleted'): Promise<SessionView> {
    const session = this.opts.registry.find(id);
    if (!session) return this.opts.registry.view(id); // already destroyed (or unknown: 404)
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

  /** A sandbox that dies, or whose network is deleted under it, fails its session within about a second (session-watch.ts). */
  private watch(session: Session, log: Logger): void {
    watchSandbox(session, log, this.watchHooks);
  }

  /** The session's sandbox of the moment (a resume from disk starts a new one: pause.ts). */
  watchSandboxProcess(session: Session): void {
    watchSandboxProcess(session, this.sessionLog(session), this.watchHooks);
  }

  /** The session's SSH connection of the moment (a resume attaches a new one: pause.ts). */
  watchConnection(session: Session, log: Logger = this.sessionLog(session)): void {
    watchConnection(session, log, this.watchHooks);
  }

  private readonly watchHooks: WatchHooks = {
    watch: (session) => this.opts.host.watch(session),
    metrics: () => this.opts.metrics,
    vanished: (session, log, reason, kind) => this.sandboxVanished(session, log, reason, kind),
  };

  private sandboxVanished(session: Session, log: Logger, reason: string, kind: 'sandbox_exit' | 'ssh' = 'sandbox_exit'): void {
    if (session.record.state !== 'ready' && session.record.state !== 'paused') return;
    // A paused guest cannot answer: a connection lost meanwhile is made again by the resume (pause.ts).
    if (kind === 'ssh' && (session.record.state === 'paused' || session.transition)) {
      log.info({ reason }, 'the SSH connection of a paused session dropped; the resume makes a new one');
      return;
    }
    // Set now, so that requests during the release are told it is gone (410), not busy.
    session.record.endReason = 'failed';
    const what = kind === 'ssh' ? 'the guest of a ready session cannot be reached any more' : 'the sandbox of a ready session is gone';
    log.warn({ reason }, `${what}: marking it failed`);
    this.opts.metrics.errors.inc({ kind });
    void this.releaseResources(session, 'failed', reason);
  }

  private releaseResources(session: Session, final: 'destroyed' | 'failed', error: string | null): Promise<void> {
    const { registry, store, metrics } = this.opts;
    session.release ??= (async () => {
      session.watch?.stop();
      session.keepalivesHeld?.(); // a paused session's held keepalives (pause.ts)
      session.keepalivesHeld = undefined;
      // A paused sandbox is let run first: its helpers and connection then close at once (a
      // frozen guest answers no close, and each would wait out its timeout), and its tasks can die.
      // One paused to disk has no process: its state file goes with the session dir.
      const paused = session.record.paused;
      if (paused?.mode === 'memory') {
        await this.opts.host
          .resume(session, paused.mode)
          .catch((err: unknown) => this.sessionLog(session).warn({ err }, 'could not resume a paused sandbox before destroying it'));
      }
      if (session.record.state !== 'destroying') this.setState(session, 'destroying');
      await flushGuestVolumes(session, (err) => this.sessionLog(session).warn({ err }, "could not sync the guest's volumes before stopping it"));
      let unmounted = false;
      try {
        await session.cleanup.run();
        unmounted = true;
        // All released: the ledger has nothing left to say (after a failure, the next start-up reclaims what it names).
        store.forgetResources(session.id);
      } catch (err) {
        metrics.errors.inc({ kind: 'destroy' });
        this.sessionLog(session).error({ err }, 'releasing sandbox resources failed');
      }
      // After its mounts are gone (a volume still attached stays held: session-volumes.ts).
      if (session.volumes) await this.opts.volumes?.release(session.volumes, unmounted);
      session.record.addressIndex = null;
      session.record.error = error;
      if (final === 'failed') session.record.endReason ??= 'failed';
      this.setState(session, final);
      metrics.activeSessions.dec();
      metrics.sessionsTotal.inc({ outcome: final });
      // A failed session stays listed (with its error) until it is destroyed.
      if (final === 'destroyed') registry.remove(session.id);
    })();
    return session.release.then(() => {
      // Destroying a failed session only records that the client is done with it.
      if (final === 'destroyed' && session.record.state === 'failed') {
        this.setState(session, 'destroyed');
        registry.remove(session.id);
      }
    });
  }

  /** Every log line about a session carries its id and its tenant. */
  sessionLog(session: Session): Logger {
    return this.opts.log.child({ sessionId: session.id, tenant: session.record.tenant });
  }

  setState(session: Session, state: SessionState): void {
    session.record.state = state;
    session.record.updatedAt = new Date().toISOString();
    this.opts.store.update(session.record);
  }
}
