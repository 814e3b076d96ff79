import { randomBytes } from 'node:crypto';
import type { IncomingMessage } from 'node:http';
import Fastify, { LogController, type FastifyBaseLogger, type FastifyInstance } from 'fastify';
import swagger from '@fastify/swagger';
import websocket from '@fastify/websocket';
import type { Logger } from 'pino';
import type { Metrics } from '../metrics/metrics.js';
import type { SessionManager } from '../sessions/manager.js';
import { installAuth, type AuthOptions } from './auth/request-identity.js';
import { installTenantScope } from './auth/tenant-scope.js';
import { installAutoResume } from './auto-resume.js';
import { sessionPauseRoutes } from './routes/session-pause.js';
import { applyConnectionLimits, connectionServerOptions, DEFAULT_CONNECTION_LIMITS, type ConnectionLimits } from './connection-limits.js';
import { errorHandler, sendError } from './errors.js';
import { OrchestratorError, type ErrorCode } from '../errors.js';
import { APP_BODY_LIMIT_BYTES } from './limits.js';
import { installRequestLog } from './logging/request-log.js';
import { closeRefusedUpgrades } from './upgrade-socket.js';
import { DEFAULT_TENANT_REQUEST_LIMITS, installTenantRequestLimits, TenantRequestGate, type TenantRequestLimits } from './tenant-request-limits.js';
import { companionToolRoutes } from './routes/companion-tools.js';
import { computerToolRoutes } from './routes/computer-tool.js';
import { desktopActionRoutes } from './routes/desktop-actions.js';
import { vendorToolRoutes } from './routes/vendor-tools.js';
import { fileRoutes } from './routes/files.js';
import { sessionRoutes } from './routes/sessions.js';
import { sessionTimeoutRoutes } from './routes/session-timeouts.js';
import { systemRoutes } from './routes/system.js';
import { templateRoutes, type TemplateListing } from './routes/templates.js';
import { linkRoutes } from './routes/links.js';
import { mcpRoutes } from './routes/mcp.js';
import { trajectoryRoutes } from './routes/trajectory.js';
import { runRoutes } from './routes/runs.js';
import type { RunManager } from '../runs/runs.js';
import type { TrajectoryRecorder } from '../sessions/trajectory/recorder.js';
import { recordingRoutes } from './routes/recording.js';
import { screenStreamRoutes } from './routes/screen-stream.js';
import { DEFAULT_TENANT_MAX_STREAMS, StreamSlots } from './stream-slots.js';
import { viewRoutes } from './routes/views.js';
import { portRoutes, presentedPortToken } from './routes/ports.js';
import { browserRoutes } from './routes/browser.js';
import { portHostRewriter } from '../ports/host-routing.js';
import type { PortTokens } from '../ports/port-tokens.js';
import type { PortSettings } from '../ports/settings.js';
import { processRoutes } from './routes/processes.js';
import { terminalRoutes } from './routes/terminal.js';
import { sessionProcesses } from '../processes/session-processes.js';
import { DEFAULT_PROCESS_LIMITS } from '../processes/limits.js';
import { fsRoutes } from './routes/fs.js';
import { volumeRoutes, type VolumeDirectory } from './routes/volumes.js';
import { snapshotRoutes, type SnapshotDirectory } from './routes/snapshots.js';
import type { LiveViews } from '../views/live-views.js';
import { toolResultSchema } from '../tools/tool-result.js';
import { bashOutputCounters, type BashOutputLimits } from '../tools/bash/output-budget.js';
import { e2bControlRoutes } from '../e2b/control-routes.js';
import { envdRewriter, envdTokenCheck } from '../e2b/envd-access.js';
import { envdRoutes } from '../e2b/envd-routes.js';
import type { E2bSandboxStore } from '../e2b/sandbox-store.js';
import type { E2bSettings } from '../e2b/settings.js';
import { actionResultSchema, errorSchema, sessionSchema } from './schemas.js';

export interface ServerOptions {
  manager: SessionManager;
  /** The templates GET /v1/templates lists (the TemplateCatalogue). */
  templates: TemplateListing;
  metrics: Metrics;
  logger: Logger;
  /** API keys and whether they are required (see auth/auth-mode.ts). */
  auth: AuthOptions;
  /** How long slow clients are waited for (defaults: DEFAULT_CONNECTION_LIMITS). */
  connectionLimits?: ConnectionLimits;
  /** Requests in flight and per second, per tenant (defaults: DEFAULT_TENANT_REQUEST_LIMITS)... */
  tenantRequestLimits?: TenantRequestLimits;
  /** ... except for these tenants. */
  tenantRequestLimitOverrides?: ReadonlyMap<string, TenantRequestLimits>;
  /** Event streams of one tenant open at once (default: DEFAULT_TENANT_MAX_STREAMS). */
  tenantMaxStreams?: number;
  /** Largest file moved by the file routes (SBX_MAX_FILE_BYTES). */
  maxFileBytes: number;
  /** Per-command timeout of the bash tool (SBX_BASH_TIMEOUT_SECONDS). */
  bashTimeoutSeconds: number;
  /** How much of a shell's output is read, and how fast (SBX_BASH_OUTPUT_*; defaults when absent). */
  bashOutput?: BashOutputLimits;
  /** Every call stored as a step of its session's trajectory, and the routes that show it (none: not recorded). */
  trajectory?: TrajectoryRecorder;
  /** The built-in Claude loop (POST /v1/runs); none: the routes are not there. */
  runs?: RunManager;
  /** Live views (noVNC pages, their WebSocket proxy, takeover); absent: no view routes. */
  views?: LiveViews;
  /** Guest ports on URLs (routes/ports.ts); absent: no port routes. */
  ports?: { tokens: PortTokens; settings: PortSettings };
  /** Volumes (routes/volumes.ts); absent: no volume routes. */
  volumes?: VolumeDirectory;
  /** Snapshots (routes/snapshots.ts); absent: no snapshot routes. */
  snapshots?: SnapshotDirectory;
  /** The E2B-compatible surface (src/e2b, docs/e2b.md); absent: its routes are not there. */
  e2b?: { store: E2bSandboxStore; settings: E2bSettings };
}

/** The limit label of sandbox_api_requests_refused_total for each cap's refusal. */
const CAP_OF_CODE: Readonly<Partial<Record<ErrorCode, string>>> = {
  tenant_stream_limit: 'streams',
  session_viewer_limit: 'viewers',
  tenant_viewer_limit: 'viewers',
  tenant_run_limit: 'runs',
  tenant_run_budget: 'run_budget',
};

/** Largest WebSocket message a live-view browser may send (a clipboard paste is the largest RFB message allowed). */
const VIEW_MAX_WS_MESSAGE_BYTES = 512 * 1024;

/** The HTTP API. Built without listening, so tests can drive it with inject(). */
export async function buildServer(opts: ServerOptions): Promise<FastifyInstance> {
  const limits = opts.connectionLimits ?? DEFAULT_CONNECTION_LIMITS;
  const app = Fastify({
    loggerInstance: opts.logger as FastifyBaseLogger,
    bodyLimit: APP_BODY_LIMIT_BYTES,
    ...connectionServerOptions(limits),
    // One line per request from our own hook instead, carrying tenant and session (logging/request-log.ts).
    logController: new LogController({ disableRequestLogging: true }),
    // A 5xx answer names its request id so the operator can find the detail in the log
    // (errors.ts): random rather than fastify's per-process counter, which starts again at
    // req-1 on every restart and so would name several requests in one log.
    genReqId: () => randomBytes(8).toString('hex'),
    // `<port>-<id>.<domain>` is routed as the path-based form of that port (ports/host-routing.ts),
    // E2B's envd calls (by its port's host name, or its E2b-Sandbox-Id header) to their routes.
    ...rewriter(opts),
    ajv: {
      // Reject what the schema does not allow instead of silently dropping or converting it.
      customOptions: { removeAdditional: false, coerceTypes: false, allErrors: false },
    },
  });
  app.setErrorHandler(async (error: Error, request, reply) => {
    // The caps of streams, viewers and runs are counted with the request limits' refusals.
    const cap = error instanceof OrchestratorError ? CAP_OF_CODE[error.code] : undefined;
    if (cap) opts.metrics.requestsRefused.inc({ limit: cap });
    // An unexpected error on a session whose sandbox vanished (or is being destroyed) under
    // the request is that, said as a 410/409, not a 500.
    // Fastify's own refusals of the request (validation 400, body too large 413) are answered
    // at once: a refused body keeps streaming into the void until the answer closes the
    // connection, so no await may come before it.
    const id = (request.params as { id?: unknown } | undefined)?.id;
    const status = (error as { statusCode?: unknown }).statusCode;
    const refusedByFastify = typeof status === 'number' && status < 500;
    if (!(error instanceof OrchestratorError) && !refusedByFastify && typeof id === 'string') {
      const ended = await opts.manager.endedUnderRequest(id).catch(() => undefined);
      if (ended) return errorHandler(ended, request, reply);
    }
    return errorHandler(error, request, reply);
  });
  // On the root instance, before any route: every route is authenticated, then scoped to
  // the tenant, unless auth/request-identity.ts lists it as open.
  const portTokens = opts.ports?.tokens;
  const e2b = opts.e2b;
  installAuth(app, {
    ...opts.auth,
    ...(portTokens ? { ports: { presented: presentedPortToken, verify: (token, id, port) => portTokens.verify(token, id, port) } } : {}),
    ...(e2b ? { envd: envdTokenCheck(e2b.store, (id) => opts.manager.tenantOf(id)) } : {}),
  });
  const gate = new TenantRequestGate(opts.tenantRequestLimits ?? DEFAULT_TENANT_REQUEST_LIMITS, opts.tenantRequestLimitOverrides);
  installTenantRequestLimits(app, gate, (limit) => opts.metrics.requestsRefused.inc({ limit }));
  installTenantScope(app, {
    tenantOf: (id) => opts.manager.tenantOf(id),
    keptOwners: async (id) => {
      const owners = new Set<string>(opts.auth.links?.tenantsOf(id) ?? []);
      const trajectoryOwner = opts.trajectory?.get(id)?.tenant;
      if (trajectoryOwner !== undefined) owners.add(trajectoryOwner);
      const recordingOwner = await opts.manager.recordingOwner(id);
      if (recordingOwner !== undefined) owners.add(recordingOwner);
      return [...owners];
    },
  });
  installAutoResume(app, opts.manager);
  installRequestLog(app);
  closeRefusedUpgrades(app);
  // An unknown route answers in the same shape as every other error (fastify's own is not).
  app.setNotFoundHandler((request, reply) => {
    void sendError(reply, 'route_not_found', `no route ${request.method} ${request.url.split('?')[0]}`);
  });
  applyConnectionLimits(app, limits);

  await app.register(swagger, {
    openapi: {
      openapi: '3.0.3',
      info: {
        title: 'Sandbox Orchestrator API',
        version: '0.1.0',
        description: 'Disposable Linux desktops for computer-use agents, driven over SSH with per-session ephemeral keys.',
      },
      tags: [
        { name: 'sessions', description: 'Sandbox lifecycle' },
        { name: 'computer', description: 'Screenshots and computer-use actions as plain JSON' },
        { name: 'desktop', description: 'Desktop actions: open, launch, windows, clipboard, screen size' },
        { name: 'tools', description: 'The tools of the computer-use loop: tool_use input in, tool_result content out' },
        { name: 'files', description: 'Files in and out of a sandbox, over SFTP' },
        { name: 'processes', description: 'Processes in a sandbox: start, stream output (SSE, WebSocket), stdin, signals, terminals' },
        { name: 'trajectory', description: 'Every call of a session, stored: as JSON, JSONL, and a page for people (link tokens)' },
        { name: 'recording', description: "Video of a session's screen, with the agent's actions as subtitles" },
        { name: 'mcp', description: 'The MCP server (streamable HTTP): sandboxes as tools of any MCP client' },
        { name: 'runs', description: 'The built-in Claude computer-use loop: run a task, follow it, stop it' },
        { name: 'ports', description: "Guest ports on URLs (HTTP, event streams, WebSockets), through the session's SSH connection" },
        { name: 'browser', description: "The desktop's Chromium, driven over CDP (Playwright connectOverCDP)" },
        { name: 'views', description: 'Live views in a browser (noVNC), view-only enforced by the server, and human takeover' },
        { name: 'system', description: 'Health and metrics' },
      ],
    },
  });
  app.addSchema(errorSchema);
  app.addSchema(sessionSchema);
  app.addSchema(actionResultSchema);
  app.addSchema(toolResultSchema);

  const { trajectory } = opts;
  await app.register(sessionRoutes, { manager: opts.manager, trajectory });
  await app.register(sessionTimeoutRoutes, { manager: opts.manager });
  await app.register(sessionPauseRoutes, { manager: opts.manager });
  await app.register(computerToolRoutes, { manager: opts.manager, trajectory });
  await app.register(companionToolRoutes, {
    manager: opts.manager,
    display: (id: string) => opts.manager.displayOf(id),
    bashTimeoutSeconds: opts.bashTimeoutSeconds,
    ...(opts.bashOutput ? { bashOutput: opts.bashOutput } : {}),
    bashCounters: bashOutputCounters(opts.metrics),
    trajectory,
  });
  await app.register(desktopActionRoutes, { manager: opts.manager, trajectory });
  await app.register(vendorToolRoutes, { manager: opts.manager, trajectory });
  await app.register(fileRoutes, { manager: opts.manager, maxFileBytes: opts.maxFileBytes });
  if (trajectory) {
    const recordingStart = (id: string, tenant: string) => opts.manager.recordingStatus(id, tenant).catch(() => undefined); // none: 404
    const recordingFrame = (id: string, tenant: string, offsetMs: number) => opts.manager.recordingFrame(id, tenant, offsetMs);
    await app.register(trajectoryRoutes, { manager: opts.manager, trajectory, recordingStart, recordingFrame });
  }
  if (opts.auth.links) {
    const owners = opts.manager;
    await app.register(linkRoutes, {
      links: opts.auth.links,
      // A trajectory is kept after its session; a terminal needs the session running.
      owns: (tenant, id, purpose) => owners.tenantOf(id) === tenant || (purpose === 'trajectory' && trajectory?.get(id)?.tenant === tenant),
    });
  }
  await app.register(recordingRoutes, { manager: opts.manager });
  const streams = new StreamSlots(opts.tenantMaxStreams ?? DEFAULT_TENANT_MAX_STREAMS);
  await app.register(screenStreamRoutes, { manager: opts.manager, streams });
  // The MCP tools call the routes above in process, as the caller (routes/mcp.ts).
  await app.register(mcpRoutes, { dispatch: (request) => app.inject(request) });
  if (opts.runs) await app.register(runRoutes, { runs: opts.runs, streams });
  await app.register(systemRoutes, { manager: opts.manager, metrics: opts.metrics });
  await app.register(templateRoutes, { templates: opts.templates });
  if (opts.volumes) await app.register(volumeRoutes, { volumes: opts.volumes });
  if (opts.snapshots) await app.register(snapshotRoutes, { snapshots: opts.snapshots });
  if (opts.ports) await app.register(portRoutes, { sessions: opts.manager, tokens: opts.ports.tokens, settings: opts.ports.settings, views: opts.views });
  if (opts.ports) await app.register(browserRoutes, { sessions: opts.manager, tokens: opts.ports.tokens });
  // After the port routes: the plugin routes every upgrade through fastify (so they are
  // authenticated like any request) and takes over only the routes declared after it; the
  // port routes pass the upgrade's raw bytes to the guest themselves.
  await app.register(websocket, { options: { maxPayload: VIEW_MAX_WS_MESSAGE_BYTES } });
  if (opts.views) await app.register(viewRoutes, { views: opts.views, paused: opts.manager });
  await app.register(processRoutes, { manager: opts.manager, streams });
  const links = opts.auth.links;
  await app.register(terminalRoutes, {
    processes: (id) => sessionProcesses(opts.manager, id, opts.manager.displayOf(id), DEFAULT_PROCESS_LIMITS),
    ...(links ? { linkStillOpens: (token: string, id: string) => links.opens(token, id, 'terminal') } : {}),
  });
  await app.register(fsRoutes, { manager: opts.manager, streams });
  if (e2b) {
    const domain = opts.ports?.settings.domain;
    await app.register(e2bControlRoutes, { manager: opts.manager, store: e2b.store, settings: e2b.settings, domain });
    await app.register(envdRoutes, { manager: opts.manager, store: e2b.store, maxFileBytes: opts.maxFileBytes, streams });
  }
  return app;
}

/** The server's rewriteUrl: envd's calls first, then the host-based guest ports; none when neither is on. */
function rewriter(opts: ServerOptions): { rewriteUrl?: (req: IncomingMessage) => string } {
  const domain = opts.ports?.settings.domain;
  const ports = domain ? portHostRewriter(domain) : undefined;
  const envd = opts.e2b ? envdRewriter(domain) : undefined;
  if (!ports && !envd) return {};
  return { rewriteUrl: (req) => envd?.(req) ?? ports?.(req) ?? req.url ?? '/' };
}
