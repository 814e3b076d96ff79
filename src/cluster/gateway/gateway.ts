/**
 * `sbx gateway`: the stateless front of a cluster (issue 22; docs/cluster.md). The same routes,
 * answers and errors as `sbx serve`, served by forwarding each request to the node that holds
 * its session (from the directory in PostgreSQL), placing creates, and serving /mcp itself
 * (its tools call the gateway's own routes in process, so they are routed like any request).
 *
 * createGateway builds the app without listening; start() begins the sweep for lost nodes
 * (and listens when given an address); close() stops both. The store is the caller's to close.
 */
import { randomBytes } from 'node:crypto';
import replyFrom from '@fastify/reply-from';
import websocket from '@fastify/websocket';
import Fastify, { LogController, type FastifyBaseLogger, type FastifyInstance } from 'fastify';
import type { Logger } from 'pino';
import { applyConnectionLimits, connectionServerOptions } from '../../api/connection-limits.js';
import { errorHandler, sendError } from '../../api/errors.js';
import { APP_BODY_LIMIT_BYTES } from '../../api/limits.js';
import { installRequestLog } from '../../api/logging/request-log.js';
import { closeRefusedUpgrades } from '../../api/upgrade-socket.js';
import { mcpRoutes } from '../../api/routes/mcp.js';
import { portHostRewriter } from '../../ports/host-routing.js';
import type { ClusterStore } from '../store/cluster-store.js';
import { installGatewayAuth } from './auth.js';
import { ClusterState } from './cluster-state.js';
import { createForwarder, installRequestCount, smallBodyWholeOrStream } from './forward.js';
import { InFlight } from './in-flight.js';
import { GatewayMetrics } from './metrics.js';
import { NodeClient } from './node-client.js';
import { Router } from './router.js';
import { runJsonRoutes, runProxyRoutes } from './run-routes.js';
import { sessionJsonRoutes, sessionProxyRoutes, type SessionRouteDeps } from './session-routes.js';
import type { GatewaySettings } from './settings.js';
import { startSweeper, type Sweeper } from './sweeper.js';
import { volumeJsonRoutes, volumeProxyRoutes } from './volume-routes.js';
import { gatewaySystemRoutes } from './system-routes.js';
import { VIEW_MAX_WS_MESSAGE_BYTES, viewTokenRoutes } from './view-routes.js';

export interface GatewayOptions {
  readonly store: ClusterStore;
  /** SBX_CLUSTER_SECRET: sent to nodes on every request (at least 32 characters). */
  readonly secret: string;
  readonly settings: GatewaySettings;
  readonly logger: Logger;
}

export interface Gateway {
  readonly app: FastifyInstance;
  readonly metrics: GatewayMetrics;
  /** Starts the sweep for lost nodes; listens when given an address. */
  start(listen?: { host: string; port: number }): Promise<void>;
  /** One sweep now (tests). */
  sweep(): Promise<string[]>;
  close(): Promise<void>;
}

export const MIN_SECRET_LENGTH = 32;

export async function createGateway(opts: GatewayOptions): Promise<Gateway> {
  if (opts.secret.length < MIN_SECRET_LENGTH) throw new Error(`SBX_CLUSTER_SECRET must be at least ${MIN_SECRET_LENGTH} characters`);
  const { settings, logger } = opts;
  const metrics = new GatewayMetrics();
  const inFlight = new InFlight();
  const state = new ClusterState({
    store: opts.store,
    logger,
    metrics,
    storeTimeoutMs: settings.storeTimeoutMs,
    directoryCacheMs: settings.directoryCacheMs,
    keyCacheMs: settings.keyCacheMs,
  });
  metrics.watchCluster(() => state.nodes());
  const requestIdPrefix = randomBytes(4).toString('hex');
  let requestCount = 0;
  const client = new NodeClient({ connectTimeoutMs: settings.nodeConnectTimeoutMs, answerTimeoutMs: settings.nodeAnswerTimeoutMs });
  const app = Fastify({
    loggerInstance: logger as FastifyBaseLogger,
    bodyLimit: APP_BODY_LIMIT_BYTES,
    ...connectionServerOptions(settings.connectionLimits),
    logController: new LogController({ disableRequestLogging: true }),
    // A guest port's host-based name is routed as its path form (ports/host-routing.ts).
    ...(settings.portsDomain ? { rewriteUrl: portHostRewriter(settings.portsDomain) } : {}),
    // A random prefix per process and a counter: unique across gateways, and no call into
    // the random source (and its getpid) per request.
    genReqId: () => requestIdPrefix + (++requestCount).toString(16).padStart(8, '0'),
    // As on a node (api/server.ts): the bodies the gateway validates get the node's 400s.
    ajv: { customOptions: { removeAdditional: false, coerceTypes: false, allErrors: false } },
  });
  app.setErrorHandler(async (error: Error, request, reply) => errorHandler(error, request, reply));
  app.setNotFoundHandler((request, reply) => {
    void sendError(reply, 'route_not_found', `no route ${request.method} ${request.url.split('?')[0]}`);
  });
  installGatewayAuth(app, state);
  installRequestLog(app);
  closeRefusedUpgrades(app);
  installRequestCount(app, metrics);
  applyConnectionLimits(app, settings.connectionLimits);
  await app.register(replyFrom, {
    disableRequestLogging: true,
    // Closing the gateway ends its connections to nodes too (a request a node never answers included).
    destroyAgent: true,
    undici: {
      connections: 256,
      pipelining: 1,
      connect: { timeout: settings.nodeConnectTimeoutMs },
      headersTimeout: settings.nodeAnswerTimeoutMs,
      // An event stream may be quiet for minutes; a node that dies is seen by its socket.
      bodyTimeout: 0,
    },
  });

  const deps: SessionRouteDeps & { gatewayMetrics: GatewayMetrics } = {
    state,
    client,
    settings,
    metrics,
    gatewayMetrics: metrics,
    logger,
    secret: opts.secret,
    router: new Router(state),
    forwarder: createForwarder(opts.secret, state, metrics, inFlight),
    inFlight,
  };
  await app.register(gatewaySystemRoutes, deps);
  await app.register(sessionJsonRoutes, deps);
  await app.register(runJsonRoutes, deps);
  await app.register(volumeJsonRoutes, deps);
  await app.register(mcpRoutes, { dispatch: (request) => app.inject(request) });
  // Forwarded routes: bodies are never parsed, whatever their type; they stream to the node.
  // The session routes forward upgrades themselves: registered before @fastify/websocket.
  const unparsed = (routes: (scope: FastifyInstance) => Promise<void>) =>
    app.register(async (raw) => {
      raw.removeAllContentTypeParsers();
      raw.addContentTypeParser('*', smallBodyWholeOrStream);
      await routes(raw);
    });
  await unparsed(async (raw) => {
    await raw.register(sessionProxyRoutes, deps);
    await raw.register(volumeProxyRoutes, deps);
  });
  await app.register(websocket, { options: { maxPayload: VIEW_MAX_WS_MESSAGE_BYTES } });
  await unparsed(async (raw) => {
    await raw.register(runProxyRoutes, deps);
    await raw.register(viewTokenRoutes, deps);
  });

  let sweeper: Sweeper | undefined;
  return {
    app,
    metrics,
    async start(listen) {
      sweeper ??= startSweeper(state, { lostAfterMs: settings.lostAfterMs, intervalMs: settings.sweepIntervalMs, logger, metrics, inFlight });
      if (listen) await app.listen(listen);
      else await app.ready();
    },
    sweep: () => (sweeper ?? startSweeper(state, { lostAfterMs: settings.lostAfterMs, intervalMs: 3_600_000, logger, metrics, inFlight })).sweep(),
    async close() {
      sweeper?.stop();
      await app.close();
      client.close();
    },
  };
}
