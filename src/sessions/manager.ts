import path from 'node:path';
import type { RawFrame } from '../computer/capture-channel.js';
import type { Logger } from 'pino';
import type { SettleOptions } from '../computer/computer-tool.js';
import type { GuestImage } from '../guest/image/builder.js';
import type { Metrics } from '../metrics/metrics.js';
import { AddressAllocator } from '../network/address-allocator.js';
import type { ResourceNames } from '../network/names.js';
import { NetworkPolicy } from '../network/policy/network-policy.js';
import { PolicyGuard } from '../network/policy/policy-guard.js';
import type { ConsoleLogLimits } from '../runtimes/console-log.js';
import type { Runtime, RuntimeName } from '../runtimes/runtime.js';
import { CapacityGate, defaultMaxSessions } from './capacity.js';
import { sessionDirOf } from './boot.js';
import { sessionFilesMiB } from './disk-capacity.js';
import { SessionClocks } from './clocks.js';
import { HostSandboxes } from './host-sandboxes.js';
import { templateDisplay } from './templates.js';
import { SessionLifecycle } from './lifecycle.js';
import { pooledSandboxHooks } from './pool/pooled-sandboxes.js';
import { WarmPool, type ScreenShape, type WarmPoolStatus } from './pool/warm-pool.js';
import { SessionRegistry } from './registry.js';
import type { SandboxHost } from './sandbox-host.js';
import { SessionActions } from './session-actions.js';
import { RecordingService, type RecordingStatus } from '../recording/recordings.js';
import { DEFAULT_RECORDING_SUBDIR, recordingSettingsFromEnv, type RecordingSettings } from '../recording/settings.js';
import type { Session } from './session.js';
import type { SessionStore } from './store.js';
import type { TemplateSource } from './templates.js';
import { SessionPauser } from './pause.js';
import type { PauseSettings } from './settings.js';
import { idleDeadline } from './timeouts.js';
import { TenantLimits, type TenantSessionLimits } from './tenant-limits.js';
import { DEFAULT_PAUSED_RETENTION_SECONDS } from './session-request.js';
import type { VolumeSource } from './session-volumes.js';
import type { SnapshotSource } from './session-fork.js';
import { SessionSnapshots } from './session-snapshots.js';

/** Sessions of an earlier run adopted at once at start-up. */
const ADOPTIONS_AT_ONCE = 8;

export type { CreateSessionOptions, SessionOwner } from './session-request.js';
export type { SessionTimeoutUpdate } from './clocks.js';
export type { ActionOutcome, SessionHealth } from './session-actions.js';
export type { AttachmentContext } from '../tools/session-access.js';

export interface ManagerOptions {
  settle: SettleOptions;
  /** How long a dropped SSH connection is retried before its session fails (default 30 s). */
  sshReconnectGiveUpMs?: number;
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
  /** Booted sandboxes kept ready for creates of this screen size, by template (count 0: no pool). */
  warmPool?: { sizes: ReadonlyMap<string, number>; shape: ScreenShape; max?: number; idleShrinkMs?: number };
  /** Where templates' images are found (the TemplateCatalogue). */
  templates: TemplateSource;
  /** The template of a session that names none. */
  defaultTemplate: string;
  /** Admission control (per host, per tenant, memory); default: limits derived from memoryMiB. */
  capacity?: CapacityGate;
  /** Console log caps (default DEFAULT_CONSOLE_LOG_LIMITS). */
  consoleLog?: ConsoleLogLimits;
  /** How sandboxes are made on the host (default: for real, HostSandboxes). Unit tests pass a fake. */
  host?: SandboxHost;
  /** How often the reaper looks for sessions whose clock ran out (default 1 s). */
  reaperIntervalMs?: number;
  /** Recordings (default: the defaults, under <stateDir>/session-recordings). */
  recording?: RecordingSettings;
  /** Pause defaults (SBX_ON_IDLE, SBX_AUTO_RESUME, SBX_PAUSED_RETENTION_SECONDS): see pause.ts. */
  pause?: PauseSettings;
  /** Tenants whose sessions get other limits (SBX_TENANT_SESSION_LIMITS, tenant-limits.ts). */
  tenantLimits?: ReadonlyMap<string, TenantSessionLimits>;
  /** Volumes sessions may mount (docs/volumes.md); absent: none. */
  volumes?: VolumeSource;
  /** Snapshots sessions may start from (docs/snapshots.md); absent: none. */
  snapshots?: SnapshotSource;
}

/**
 * The session layer put together: the registry of live sessions, their lifecycle, their
 * clocks, the warm pool, and what requests do with a ready session. Routes depend on the
 * narrow interfaces in ports.ts, which this implements; each role is its own module.
 */
export class SessionManager {
  readonly registry: SessionRegistry;
  readonly lifecycle: SessionLifecycle;
  readonly clocks: SessionClocks;
  readonly actions: SessionActions;
  readonly pauser: SessionPauser;
  readonly capacity: CapacityGate;
  readonly policy: NetworkPolicy;
  /** Keeps the policy in force; creates are refused while it is not (policy-guard.ts). */
  readonly policyGuard: PolicyGuard;
  private readonly addresses: AddressAllocator;
  private readonly host: SandboxHost;
  private readonly warmPools: Map<string, WarmPool>;
  /** Screen recordings of sessions (recording/). */
  readonly recordings: RecordingService;
  /** What a snapshot asks of the sessions (snapshots/snapshots.ts attaches it). */
  readonly snapshotting: SessionSnapshots;

  constructor(private readonly opts: ManagerOptions) {
    const { runtime, store, metrics, log } = opts;
    this.capacity =
      opts.capacity ??
      new CapacityGate({ maxSessions: defaultMaxSessions(opts.memoryMiB), maxSessionsPerTenant: 10, sessionMemoryMiB: opts.memoryMiB, memoryReserveMiB: 512 });
    this.addresses = new AddressAllocator(opts.subnet, log);
    this.policy = new NetworkPolicy(opts.names, opts.subnet, log, runtime.capabilities.hostOnlySources);
    this.policyGuard = new PolicyGuard(this.policy, {
      intervalMs: opts.networkPolicyCheckMs ?? 3_000,
      onRepair: () => metrics.networkPolicyRepairs.inc(),
      log: log.child({ part: 'network-policy' }),
    });
    this.host = opts.host ?? new HostSandboxes({ ...opts, addresses: this.addresses, policy: this.policy, policyGuard: this.policyGuard });
    this.registry = new SessionRegistry(store);
    this.snapshotting = new SessionSnapshots(this.registry, runtime, this.host);
    const limits = new TenantLimits(
      {
        maxLifetimeSeconds: opts.maxLifetimeSeconds,
        pausedRetentionSeconds: opts.pause?.pausedRetentionSeconds ?? DEFAULT_PAUSED_RETENTION_SECONDS,
        timeoutSeconds: opts.defaultTimeoutSeconds,
        onIdle: opts.pause?.onIdle ?? 'destroy',
      },
      opts.tenantLimits,
    );
    this.lifecycle = new SessionLifecycle({
      registry: this.registry,
      store,
      host: this.host,
      addresses: this.addresses,
      capacity: this.capacity,
      metrics,
      log,
      runtimeName: runtime.name,
      templates: opts.templates,
      volumes: opts.volumes,
      snapshots: opts.snapshots,
      runtimeVolumes: runtime.capabilities.volumes,
      disk: {
        writableMiB: (image) => runtime.writableDiskMiB?.(image) ?? 0,
        usedMiB: (id) => sessionFilesMiB(sessionDirOf(opts.stateDir, id)),
      },
      defaults: {
        defaultTimeoutSeconds: opts.defaultTimeoutSeconds,
        maxLifetimeSeconds: opts.maxLifetimeSeconds,
        template: opts.defaultTemplate,
        onIdle: opts.pause?.onIdle,
        autoResume: opts.pause?.autoResume,
        pausedRetentionSeconds: opts.pause?.pausedRetentionSeconds,
      },
      limits,
    });
    this.clocks = new SessionClocks({
      registry: this.registry,
      store,
      limits,
      expire: (id, reason) => void this.lifecycle.destroy(id, reason),
      log,
      reaperIntervalMs: opts.reaperIntervalMs,
      // An idle pause that cannot be done ends the session as an idle timeout would.
      idlePause: (id) =>
        void this.pauser.pause(id, 'auto').catch((err: unknown) => {
          log.warn({ err, sessionId: id }, 'pausing an idle session failed; destroying it');
          return this.lifecycle.destroy(id, 'idle_timeout');
        }),
    });
    this.recordings = new RecordingService({
      settings: opts.recording ?? recordingSettingsFromEnv({}),
      dir: opts.recording?.dir ?? path.join(opts.stateDir, DEFAULT_RECORDING_SUBDIR),
      metrics,
      log: log.child({ part: 'recording' }),
    });
    this.registry.recordingOf = (id) => this.recordings.statusNow(id);
    this.pauser = new SessionPauser({
      registry: this.registry,
      store,
      host: this.host,
      metrics,
      log,
      setState: (session, state) => this.lifecycle.setState(session, state),
      watchConnection: (session) => this.lifecycle.watchConnection(session),
      watchSandbox: (session) => this.lifecycle.watchSandboxProcess(session),
      fail: (session, reason) => this.lifecycle.fail(session, reason),
      recordings: this.recordings,
      diskRoomMiB: () => this.capacity.diskRoomMiB(),
      sessionMemoryMiB: opts.memoryMiB,
    });
    this.actions = new SessionActions({
      registry: this.registry,
      clocks: this.clocks,
      store,
      metrics,
      onAction: (id, action, at, ms) => this.recordings.noteAction(id, action, at, ms),
    });
    this.warmPools = this.lifecycle.warmPools;
    // The default template's pool always exists (size 0: empty), so that it can be resized and its gauge reads 0.
    const sizes = new Map(opts.warmPool?.sizes ?? []);
    if (opts.warmPool && !sizes.has(opts.defaultTemplate)) sizes.set(opts.defaultTemplate, 0);
    for (const [template, size] of sizes) this.makeWarmPool(template, size);
  }

  /** The pool of one template (one pool per template: a claim takes only its own). */
  private makeWarmPool(template: string, size: number): WarmPool | undefined {
    const { warmPool: warm, runtime, log, metrics, store, templates } = this.opts;
    if (!runtime.capabilities.configDirIsLive) {
      if (size > 0) {
        log.warn({ runtime: runtime.name }, 'warm pool is off: it hands a sandbox to a new key through its live config dir, which this runtime does not have');
      }
      return undefined;
    }
    const hooks = pooledSandboxHooks(
      { lifecycle: this.lifecycle, host: this.host, addresses: this.addresses, store, metrics, log, runtimeName: runtime.name, templates },
      template,
    );
    const shape = warm?.shape ?? { width: 1024, height: 768 };
    const bounds = { max: warm?.max ?? 0, idleShrinkMs: warm?.idleShrinkMs };
    const pool = new WarmPool({ template, size, shape, metrics, log: log.child({ part: 'warm-pool', template }), hooks, ...bounds });
    this.warmPools.set(template, pool);
    return pool;
  }

  /**
   * Adopts the sessions an earlier run left ready whose sandboxes still run and answer,
   * reclaims everything else it left behind, then starts the clocks and the warm pool.
   */
  async start(): Promise<void> {
    const adopted: Session[] = [];
    // A pooled sandbox is not adopted: its pool key would have to be trusted again.
    const candidates = this.opts.store.unfinished().filter((record) => (record.state === 'ready' || record.state === 'paused') && !record.pooled);
    // Several at once: a guest that will not answer takes its whole adoption timeout, and
    // one tenant's broken sandboxes, in turn, would hold every tenant's start-up.
    const adoptNext = async (): Promise<void> => {
      for (let record = candidates.shift(); record; record = candidates.shift()) {
        const session = await this.host.adopt(record);
        if (!session) continue;
        settleAdoptedPause(session);
        await this.lifecycle.admitAdopted(session);
        adopted.push(session);
      }
    };
    await Promise.all(Array.from({ length: ADOPTIONS_AT_ONCE }, adoptNext));
    const reclaimed = await this.host.recover(adopted);
    if (adopted.length > 0) this.opts.log.info({ adopted: adopted.length }, 'adopted live sessions of an earlier run');
    if (reclaimed > 0) this.opts.log.warn({ reclaimed }, 'reclaimed sandboxes left behind by an earlier run');
    await this.recordings.recover();
    this.clocks.start();
    for (const pool of this.warmPools.values()) pool.start();
  }

  /** Destroys every session and every pooled sandbox (SIGTERM, tests). */
  async shutdown(): Promise<void> {
    this.lifecycle.beginShutdown();
    this.clocks.stop();
    this.host.stopPolicyGuard();
    await Promise.allSettled([
      ...[...this.warmPools.values()].map((pool) => pool.stop()),
      ...this.registry.ids().map((id) => this.lifecycle.destroy(id, 'shutdown')),
    ]);
    await this.recordings.close();
    await this.host.removePolicy();
  }

  /** A template's warm pool as it is now (default: the default template's; target 0 and nothing ready when there is none). */
  warmPoolStatus(template: string = this.opts.defaultTemplate): WarmPoolStatus {
    return (
      this.warmPools.get(template)?.status() ?? { template, target: 0, shape: this.opts.warmPool?.shape ?? { width: 1024, height: 768 }, ready: [], booting: 0 }
    );
  }

  /** Every template's warm pool. */
  warmPoolStatuses(): WarmPoolStatus[] {
    return [...this.warmPools.values()].map((pool) => pool.status());
  }

  /** Changes how many sandboxes a template's warm pool keeps ready (the benchmark uses it); makes the pool if needed. */
  async resizeWarmPool(size: number, template: string = this.opts.defaultTemplate): Promise<void> {
    const existing = this.warmPools.get(template);
    if (existing) return existing.resize(size);
    const pool = this.makeWarmPool(template, size);
    if (!pool) throw new Error('there is no warm pool on a runtime without a live config dir');
    pool.start();
  }

  /** Address blocks leased now (sessions and pooled sandboxes): a leak shows here. */
  get leasesInUse(): number {
    return this.addresses.inUse;
  }

  get runtimeName(): RuntimeName {
    return this.opts.runtime.name;
  }

  /** The X display number inside every guest whose template does not start its own (SBX_DISPLAY). */
  get display(): number {
    return this.opts.display;
  }

  /** The X display of one session's guest: its template's own (xfce: 0, started by the session), else SBX_DISPLAY. */
  displayOf(id: string): number {
    const session = this.registry.find(id);
    const own = session?.image?.display ?? (session && templateDisplay(session.record.template));
    return own ? own.number : this.opts.display;
  }

  /** Whether a session's X server is started by the session's own programs (the xfce template), not by our init. */
  displayStartedBySession(id: string): boolean {
    const session = this.registry.find(id);
    return (session?.image?.display ?? (session && templateDisplay(session.record.template)))?.server === 'session';
  }

  // The roles' methods, as the routes (ports.ts), the CLI and the tests call them.
  /** Creates a session; with `record`, its recording starts once it is ready (a failure to start shows in its view). */
  readonly create: SessionLifecycle['create'] = async (options, owner) => {
    const view = await this.lifecycle.create(options, owner);
    if (!options?.record) return view;
    await this.startRecording(view.id).catch((err: Error) => this.opts.log.warn({ err, sessionId: view.id }, 'recording could not start'));
    return this.registry.view(view.id);
  };

  /** Starts recording a ready session's screen (nothing changes if it is being recorded). */
  async startRecording(id: string): Promise<RecordingStatus> {
    const session = this.registry.ready(id);
    const { computer } = session;
    // The session's computer of the moment: a resume (pause.ts) attaches a new one.
    const current = () => session.computer ?? computer;
    return this.recordings.start({
      id,
      tenant: session.record.tenant,
      screen: computer.scaler.screen,
      toScreen: (p) => current().scaler.toScreen(p),
      copyFrame: (maxAgeMs, target, have) => current().copyFrameInto(maxAgeMs, target, have),
      cleanup: session.cleanup,
    });
  }

  /** Stops a recording; with `tenant` (a client's request), only that tenant's. */
  readonly stopRecording = (id: string, tenant?: string): Promise<RecordingStatus> => this.recordings.stop(id, 'requested', tenant);
  /** A ready session's screen now, for the screen stream (not activity: watching keeps nothing alive). */
  readonly screenFrame = (id: string, maxAgeMs: number): Promise<RawFrame | undefined> => this.registry.ready(id).computer.watchFrame(maxAgeMs);
  readonly recordingStatus: RecordingService['status'] = (id, tenant) => this.recordings.status(id, tenant);
  readonly recordingFiles: RecordingService['files'] = (id, tenant) => this.recordings.files(id, tenant);
  /** A frame of a session's recording (the tenant's only), for the trajectory page. */
  readonly recordingFrame: RecordingService['frameAt'] = (id, tenant, offsetMs) => this.recordings.frameAt(id, tenant, offsetMs);
  /** The tenant a session's recording names as its own (kept days after the session's row goes). */
  readonly recordingOwner: RecordingService['ownerOf'] = (id) => this.recordings.ownerOf(id);
  /** Where a moment falls in a session's video (ms since its recording started), for the trajectory's links; undefined without a recording. */
  readonly videoOffsetMs: RecordingService['videoOffsetMs'] = (id, at) => this.recordings.videoOffsetMs(id, at);
  readonly destroy: SessionLifecycle['destroy'] = (id, reason) => this.lifecycle.destroy(id, reason);
  readonly pause: SessionPauser['pause'] = (id, mode) => this.pauser.pause(id, mode);
  readonly resume: SessionPauser['resume'] = (id) => this.pauser.resume(id);
  readonly ensureRunning: SessionPauser['ensureRunning'] = (id) => this.pauser.ensureRunning(id);
  readonly list: SessionRegistry['list'] = (tenant) => this.registry.list(tenant);
  readonly get: SessionRegistry['view'] = (id) => this.registry.view(id);
  readonly tenantOf: SessionRegistry['tenantOf'] = (id) => this.registry.tenantOf(id);
  readonly keepalive: SessionClocks['keepalive'] = (id, timeoutSeconds) => this.clocks.keepalive(id, timeoutSeconds);
  readonly updateTimeouts: SessionClocks['updateTimeouts'] = (id, update) => this.clocks.updateTimeouts(id, update);
  readonly transferActivity: SessionClocks['transferActivity'] = (id) => this.clocks.transferActivity(id);
  readonly whileBusy: SessionClocks['whileBusy'] = (id, work) => this.clocks.whileBusy(id, work);
  readonly health: SessionActions['health'] = (id) => this.actions.health(id);
  readonly screenshot: SessionActions['screenshot'] = (id, scaled) => this.actions.screenshot(id, scaled);
  readonly act: SessionActions['act'] = (id, input, options) => this.actions.act(id, input, options);
  readonly perform: SessionActions['perform'] = (id, translate, options) => this.actions.perform(id, translate, options);
  readonly setControl: SessionActions['setControl'] = (id, hold) => this.actions.setControl(id, hold);
  readonly checkAgentControl: SessionActions['checkAgentControl'] = (id) => this.actions.checkAgentControl(id);
  readonly connection: SessionActions['connection'] = (id) => this.actions.connection(id);
  readonly attachment: SessionActions['attachment'] = (id, name, create) => this.actions.attachment(id, name, create);
  readonly endedUnderRequest: SessionActions['endedUnderRequest'] = (id) => this.actions.endedUnderRequest(id);
}

/**
 * A session stored paused whose sandbox was found running and attached (a restart after a
 * resume that thawed it but had not stored it yet) is ready: its pause ends now.
 */
function settleAdoptedPause(session: Session): void {
  const { record } = session;
  if (record.state !== 'paused' || !session.connection) return;
  const now = Date.now();
  if (record.paused) record.pausedMs += Math.max(0, now - Date.parse(record.paused.since));
  record.paused = null;
  record.state = 'ready';
  record.expiresAt = idleDeadline(record, now);
}
