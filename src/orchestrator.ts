import { mkdir, rmdir } from 'node:fs/promises';
import path from 'node:path';
import type { FastifyInstance } from 'fastify';
import type { Logger } from 'pino';
import { resolveAuthMode, type AuthMode } from './api/auth/auth-mode.js';
import type { ClusterAuth } from './api/auth/cluster-identity.js';
import { KeyRequirement } from './api/auth/key-requirement.js';
import { KeyStore } from './api/auth/key-store.js';
import { buildServer } from './api/server.js';
import { describeConfig, type OrchestratorConfig } from './config.js';
import type { GuestImage } from './guest/image/builder.js';
import { networkView } from './sessions/session-view.js';
import { Metrics } from './metrics/metrics.js';
import { takeOrchestratorLock, type OrchestratorLock } from './orchestrator-lock.js';
import { ResourceNames } from './network/names.js';
import { RUNTIMES } from './runtimes/registered.js';
import type { RuntimeSelection } from './runtimes/registry.js';
import { bashOutputCounters } from './tools/bash/output-budget.js';
import { CapacityGate } from './sessions/capacity.js';
import { CheckedTemplates } from './sessions/checked-templates.js';
import { stateDirFreeMiB } from './sessions/disk-capacity.js';
import { SessionManager } from './sessions/manager.js';
import { warmPoolSizes } from './sessions/settings.js';
import { SessionStore } from './sessions/store.js';
import { Volumes } from './volumes/volumes.js';
import { VolumeStore } from './volumes/volume-store.js';
import { Snapshots } from './snapshots/snapshots.js';
import { SnapshotStore } from './snapshots/snapshot-store.js';
import { TemplateCatalogue } from './templates/catalogue.js';
import { LinkTokens } from './api/links/link-tokens.js';
import { TrajectoryRecorder } from './sessions/trajectory/recorder.js';
import { TrajectoryStore } from './sessions/trajectory/trajectory-store.js';
import { RunManager, type AnthropicSettings } from './runs/runs.js';
import { LiveViews, type LiveViewSettings } from './views/live-views.js';
import { DEFAULT_LIVE_VIEW_SETTINGS } from './views/settings.js';
import { ViewTokens } from './views/view-tokens.js';
import { E2bSandboxStore } from './e2b/sandbox-store.js';
import { PortTokens } from './ports/port-tokens.js';
import type { PortSettings } from './ports/settings.js';

export interface Orchestrator {
  config: OrchestratorConfig;
  names: ResourceNames;
  manager: SessionManager;
  metrics: Metrics;
  server: FastifyInstance;
  /** The default template's image. */
  image: GuestImage;
  /** Built-in and user templates (GET /v1/templates). */
  templates: TemplateCatalogue;
  /** API keys in the store (the CLI's `sbx keys` works on the same table). */
  keys: KeyStore;
  authMode: AuthMode;
  /** Whether requests without a key are refused now (once true, true until a restart). */
  keyRequirement: KeyRequirement;
  /** Every session's calls, stored (its pruning can be run by hand: tests). */
  trajectory: TrajectoryRecorder;
  /** Live views of sessions (views/live-views.ts). */
  views: LiveViews;
  /** Destroys every session, stops the server and closes the store. */
  close(): Promise<void>;
}

export interface StartOptions {
  /** Build the guest image if it is missing (default true); false fails with a hint instead. */
  buildImageIfMissing?: boolean;
  /** Listen on config.host:config.port (default true); tests may use inject() instead. */
  listen?: boolean;
  /**
   * A runtime made by the caller instead of the one config.runtime selects: for tests that
   * run the Firecracker runtime against its contract emulator on hosts without KVM.
   */
  runtime?: RuntimeSelection;
  /** The Messages API of the built-in loop (ANTHROPIC_API_KEY, ANTHROPIC_BASE_URL, read by the CLI). */
  anthropic?: AnthropicSettings;
  /** Live-view settings other than the defaults (tests shorten the takeover grace). */
  liveViews?: Partial<LiveViewSettings>;
  /** Guest-port settings other than the configuration's (tests set a domain and short timeouts). */
  ports?: Partial<PortSettings>;
  /**
   * A cluster's node (`sbx node`): requests come from its gateways only, which check API keys
   * in the cluster's database; this node's own keys are not used (docs/cluster.md).
   */
  cluster?: ClusterAuth;
}

/** Wires the parts together: store, runtime, image, session manager, HTTP server. */
export async function startOrchestrator(config: OrchestratorConfig, log: Logger, options: StartOptions = {}): Promise<Orchestrator> {
  // Every setting in one line first, so that what follows can be read against it.
  log.info({ config: describeConfig(config) }, 'configuration');
  // Before anything else, reclaim above all: a second orchestrator with this prefix must not
  // take the first one's live sandboxes for leftovers (orchestrator-lock.ts).
  const lock = await takeOrchestratorLock(config.resourcePrefix, { host: config.host, port: config.port, stateDir: config.stateDir });
  try {
    return await startLocked(config, log, options, lock);
  } catch (err) {
    await lock.release();
    throw err;
  }
}

async function startLocked(config: OrchestratorConfig, log: Logger, options: StartOptions, lock: OrchestratorLock): Promise<Orchestrator> {
  await mkdir(config.stateDir, { recursive: true, mode: 0o700 });
  // The store first: whether the server may run keyless depends on the keys it holds, and a
  // server that must not start should refuse before it touches anything else.
  const store = new SessionStore(path.join(config.stateDir, 'orchestrator.db'));
  const keys = new KeyStore(store.database);
  let authMode: AuthMode;
  try {
    authMode = options.cluster
      ? 'required'
      : resolveAuthMode(config.auth, config.host, { usable: keys.hasUnrevokedKeys(), ever: keys.hasAnyKey() }, config.stateDir);
  } catch (err) {
    store.close();
    throw err;
  }
  if (options.cluster) log.info({ auth: 'cluster' }, 'a node of a cluster: requests are taken from its gateways only (x-sbx-cluster-secret)');
  else logAuthMode(log, authMode, config.host);
  const keyRequirement = new KeyRequirement(authMode, keys, () =>
    log.warn({ auth: 'required' }, 'an API key was created: keys are required from now on, for good (revoking every key does not turn them off)'),
  );
  const names = new ResourceNames(config.resourcePrefix);
  const selection = options.runtime ?? (await RUNTIMES.select(config.runtime, names, config.runtimes));
  log.info({ runtime: selection.runtime.name, reason: selection.reason, how: selection.runtime.describe() }, 'runtime selected');
  if (config.runtime === 'auto' && selection.runtime.capabilities.sharesHostKernel && keys.hasUnrevokedKeys()) {
    warnContainersAreTheBoundary(log, selection.reason);
  }
  const poolSizes = warmPoolSizes(config, config.template);
  const pooled = [...poolSizes.values()].reduce((a, b) => a + b, 0);
  await selection.runtime.prepareHost?.(config.maxSessions + pooled, log.child({ runtime: selection.runtime.name }));

  const templates = new TemplateCatalogue(config.imagesDir);
  let image = (await templates.resolve(config.template).catch(() => undefined))?.image;
  if (!image) {
    if (options.buildImageIfMissing === false) {
      throw new Error(`no guest image of template ${config.template} in ${config.imagesDir}: build it with \`sbx image build --template ${config.template}\``);
    }
    log.info({ template: config.template }, 'guest image not built yet; building it now (a few minutes, once)');
    image = await templates.ensureBuiltIn(config.template, (line) => log.info(line));
  }
  // Every image a session may boot is checked for damage before its first use: these now
  // (a damaged one stops the start, saying what to run), any other at its first create.
  const checkedTemplates = new CheckedTemplates(
    templates,
    (name) =>
      (templates.isBuiltIn(name) ? `sbx image build --template ${name} --force` : `sbx template build <the template file of ${name}> --force`) +
      ` (images dir ${config.imagesDir})`,
    log.child({ part: 'images' }),
  );
  await checkedTemplates.check(config.template, image);
  log.info({ image: image.hash, template: config.template }, 'guest image ready');
  // Every template a warm pool keeps must exist now: a typo should stop the start, not retry forever.
  const prepared = new Map<string, GuestImage>([[image.hash, image]]);
  for (const template of poolSizes.keys()) {
    const resolved = await templates.resolve(template).catch((err: unknown) => {
      throw new Error(`SBX_WARM_POOL: ${err instanceof Error ? err.message : String(err)}`);
    });
    await checkedTemplates.check(template, resolved.image);
    prepared.set(resolved.image.hash, resolved.image);
  }

  const metrics = new Metrics();
  // Volumes (docs/volumes.md): rows beside the sessions', files under <stateDir>/volumes.
  const volumes = new Volumes({
    store: new VolumeStore(store.database),
    dir: path.join(config.stateDir, 'volumes'),
    settings: config.volumes,
    log: log.child({ part: 'volumes' }),
  });
  await volumes.prepare();
  // Snapshots (docs/snapshots.md): rows beside the sessions', files under <stateDir>/snapshots.
  const snapshots = new Snapshots({
    store: new SnapshotStore(store.database),
    dir: path.join(config.stateDir, 'snapshots'),
    settings: config.snapshots,
    runtime: selection.runtime.name,
    log: log.child({ part: 'snapshots' }),
  });
  await snapshots.recover();
  const stateDirFree = stateDirFreeMiB(config.stateDir);
  const manager = new SessionManager({
    stateDir: config.stateDir,
    settle: { maxMs: config.settleMaxMs, intervalMs: config.settleIntervalMs },
    sshReconnectGiveUpMs: config.sshReconnectGiveUpMs,
    names,
    display: config.display,
    subnet: config.subnet,
    networkPolicyCheckMs: config.networkPolicyCheckMs,
    defaultTimeoutSeconds: config.defaultTimeoutSeconds,
    maxLifetimeSeconds: config.maxLifetimeSeconds,
    bootTimeoutMs: config.bootTimeoutMs,
    memoryMiB: config.memoryLimitMiB,
    pidsLimit: config.pidsLimit,
    runtime: selection.runtime,
    image,
    templates: checkedTemplates,
    defaultTemplate: config.template,
    store,
    metrics,
    log,
    capacity: new CapacityGate(
      {
        maxSessions: config.maxSessions,
        maxSessionsPerTenant: config.maxSessionsPerTenant,
        sessionMemoryMiB: config.memoryLimitMiB,
        memoryReserveMiB: config.memoryReserveMiB,
      },
      undefined,
      {
        // A session's recordings and trajectory are promised at their caps, on the state dir's filesystem.
        limits: { reserveMiB: config.diskReserveMiB, artifactsMiB: (config.recording.maxBytes + config.trajectory.maxSessionBytes) / 2 ** 20 },
        // Less what the volumes may still fill (docs/volumes.md): they were promised it first.
        freeMiB: () => {
          const free = stateDirFree();
          return free === undefined ? undefined : free - volumes.promisedMiB();
        },
      },
    ),
    warmPool: { sizes: poolSizes, shape: config.warmPoolScreen, max: config.warmPoolMax },
    consoleLog: config.consoleLog,
    recording: config.recording,
    pause: config.pause,
    tenantLimits: config.tenantSessionLimits,
    volumes,
    snapshots,
  });
  snapshots.attach(manager.snapshotting);
  log.info(
    {
      maxSessions: config.maxSessions,
      maxSessionsPerTenant: config.maxSessionsPerTenant,
      memoryReserveMiB: config.memoryReserveMiB,
      diskReserveMiB: config.diskReserveMiB,
    },
    'capacity limits',
  );
  log.info(
    {
      maxConcurrent: config.tenantMaxConcurrentRequests,
      perSecond: config.tenantRequestsPerSecond,
      burst: config.tenantRequestBurst,
      overrides: Object.fromEntries(config.tenantRequestLimitOverrides),
    },
    'request limits per tenant',
  );
  if (config.tenantSessionLimits.size > 0) log.info({ overrides: Object.fromEntries(config.tenantSessionLimits) }, 'session limits per tenant');
  metrics.observeSessionNetworks(() =>
    manager.registry
      .all()
      .filter((session) => session.record.state !== 'destroyed')
      .map((session) => networkView(session.record)),
  );
  await manager.start();
  // Trajectories live beside the sessions' rows, their screenshots under <stateDir>/trajectories/
  // (not in a session's own dir, which goes when it is destroyed: a trajectory outlives it).
  const trajectory = new TrajectoryRecorder({
    store: new TrajectoryStore(store.database),
    dir: path.join(config.stateDir, 'trajectories'),
    settings: config.trajectory,
    describe: (id) => {
      const record = manager.registry.find(id)?.record;
      return record && { tenant: record.tenant, createdAt: record.createdAt };
    },
    isLive: (id) => manager.registry.find(id) !== undefined,
    log: log.child({ part: 'trajectory' }),
    metrics,
  });
  trajectory.start();
  // Once per image a session can boot at start-up (the default's and the pools'); another
  // template's image boots without it (prepare is an optimisation, see Runtime.prepare).
  for (const preparedImage of prepared.values()) {
    await selection.runtime.prepare?.(preparedImage, { display: config.display, pidsLimit: config.pidsLimit }, (message) =>
      log.info({ runtime: selection.runtime.name }, message),
    );
  }
  const runs = new RunManager({
    sessions: manager,
    database: store.database,
    anthropic: options.anthropic ?? {},
    bashTimeoutSeconds: config.bashTimeoutSeconds,
    bashOutput: { limits: config.bashOutput, counters: bashOutputCounters(metrics) },
    trajectory,
    settings: config.runs,
    log: log.child({ part: 'runs' }),
  });
  const views = new LiveViews(
    new ViewTokens(store.database),
    manager,
    { ...DEFAULT_LIVE_VIEW_SETTINGS, ...config.liveViews, ...options.liveViews },
    {
      viewerConnected: () => metrics.liveViewers.inc(),
      viewerDisconnected: () => metrics.liveViewers.dec(),
      bytes: (direction, bytes) => metrics.liveViewBytes.inc({ direction }, bytes),
    },
    log.child({ part: 'live-views' }),
  );
  const server = await buildServer({
    views,
    ports: { tokens: new PortTokens(store.database), settings: { ...config.ports, ...options.ports } },
    e2b: { store: new E2bSandboxStore(store.database), settings: config.e2b },
    manager,
    runs,
    templates,
    metrics,
    logger: log,
    auth: { keys, requirement: keyRequirement, links: new LinkTokens(store.database), ...(options.cluster ? { cluster: options.cluster } : {}) },
    trajectory,
    connectionLimits: { headersTimeoutMs: config.headersTimeoutMs, requestTimeoutMs: config.requestTimeoutMs, sendTimeoutMs: config.sendTimeoutMs },
    tenantRequestLimits: { maxConcurrent: config.tenantMaxConcurrentRequests, perSecond: config.tenantRequestsPerSecond, burst: config.tenantRequestBurst },
    tenantRequestLimitOverrides: config.tenantRequestLimitOverrides,
    tenantMaxStreams: config.tenantMaxStreams,
    maxFileBytes: config.maxFileBytes,
    bashTimeoutSeconds: config.bashTimeoutSeconds,
    bashOutput: config.bashOutput,
    volumes,
    snapshots,
  });
  if (options.listen !== false) {
    await server.listen({ host: config.host, port: config.port });
    const address = server.server.address();
    if (address && typeof address === 'object') await lock.update({ host: config.host, port: address.port });
  }

  let closing: Promise<void> | undefined;
  return {
    config,
    names,
    manager,
    metrics,
    server,
    image,
    templates,
    keys,
    authMode,
    keyRequirement,
    trajectory,
    views,
    close() {
      closing ??= (async () => {
        await runs.stopAll();
        await manager.shutdown();
        // runc's state and the rootfs mount points under /run, once no sandbox is left in them
        // (a stop that leaves sandboxes for the next start to adopt keeps them: not empty).
        await Promise.all([names.runcRoot, names.rootfsRoot].map((dir) => rmdir(dir).catch(() => undefined)));
        trajectory.stop();
        await server.close();
        store.close();
        await lock.release();
      })();
      return closing;
    },
  };
}

/**
 * Several tenants (API keys exist) and no VM runtime: `auto` fell back to containers. Said at
 * warn level, in words an operator can act on: tenants then share the host's kernel.
 */
function warnContainersAreTheBoundary(log: Logger, reason: string): void {
  log.warn(
    { runtime: 'container', reason },
    'MULTI-TENANT WITH CONTAINERS: API keys exist, and no VM runtime can run here, so runc containers are the only ' +
      "isolation between tenants. Every tenant's sandbox runs on this host's own kernel (user namespace with its own " +
      'uid range, seccomp allow-list, dropped capabilities, cgroup limits): a kernel vulnerability reachable from inside a ' +
      'sandbox would expose the host and every other tenant. For mutually untrusting tenants, run where /dev/kvm is usable ' +
      '(Firecracker or qemu with KVM), or pass --runtime container to acknowledge this choice',
  );
}

/** Keyless is said loudly, at warn level, so it cannot go unnoticed in any log setup. */
function logAuthMode(log: Logger, mode: AuthMode, host: string): void {
  if (mode === 'required') {
    log.info({ auth: mode, host }, 'API keys required (Authorization: Bearer <key>)');
  } else if (mode === 'keyless') {
    log.warn(
      { auth: mode, host },
      'AUTHENTICATION IS OFF (--no-auth / SBX_AUTH=off): anyone on this machine can use the API; every session belongs to tenant "local"',
    );
  } else {
    log.warn(
      { auth: mode, host },
      'NO API KEYS: serving WITHOUT AUTHENTICATION on loopback only (local development); every session belongs to tenant "local". ' +
        'Keys are required, for good, as soon as one exists: `sbx keys create --tenant <name>`',
    );
  }
}
