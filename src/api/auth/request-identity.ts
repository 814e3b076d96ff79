import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { NotFoundError } from '../../errors.js';
import { LOCAL_TENANT } from '../../sessions/session-record.js';
import { isLoopbackAddress } from './auth-mode.js';
import { assertNotFromAWebPage } from './browser-guard.js';
import { assertFromGateway, CLUSTER_SECRET_HEADER, forwardedClient, gatewayIdentity, placedSessionId, type ClusterAuth } from './cluster-identity.js';
import type { KeyRequirement } from './key-requirement.js';
import type { KeyStore } from './key-store.js';
import type { LinkPurpose, LinkTokens } from '../links/link-tokens.js';
import { bindRequestLog } from '../logging/request-log.js';
import { missingKeyError, verifyAuthorization, type Identity } from './verify-key.js';

declare module 'fastify' {
  interface FastifyRequest {
    /** The tenant the request acts for; set by the auth hook before any handler runs. */
    tenant: string;
    /** The id of the API key used (null in keyless mode, and on open routes). */
    apiKeyId: string | null;
    /** On a cluster's node, the session id its gateway placed for a create (null elsewhere). */
    placedSessionId: string | null;
    /** Where the request came from: the socket's peer, or on a cluster's node the client its gateway names. */
    clientAddress: string;
  }
  interface FastifyContextConfig {
    /** The route also opens with a link token of this purpose in ?token= (pages a browser opens). */
    linkPurpose?: LinkPurpose;
    /** A guest port's route: it also opens with a port token of its session and port (routes/ports.ts). */
    portAccess?: boolean;
    /**
     * A route of the E2B surface (src/e2b): `api-key` takes our API key in E2B's X-API-Key
     * header too; `envd` is opened by its sandbox's envd access token (X-Access-Token), not a key.
     */
    e2b?: 'api-key' | 'envd';
  }
}

/** What the auth hook needs of the E2B surface: the tenant an envd request's access token opens. */
export interface EnvdTokenCheck {
  /** The tenant of the sandbox the request names, or throws (404 unknown sandbox, 401 wrong token). */
  verify(request: FastifyRequest): string;
}

/** What the auth hook needs of port tokens: where a request presents one, and whether it opens the request's port. */
export interface PortTokenCheck {
  presented(request: FastifyRequest): string | undefined;
  /** The tenant and token id the token gives, or throws a 401. */
  verify(token: string, sessionId: string, port: number): { tenant: string; id: string };
}

export interface AuthOptions {
  keys: KeyStore;
  /** Whether a request without a key is refused (latched: see key-requirement.ts). */
  requirement: KeyRequirement;
  /** Link tokens, for the routes that open with one (config.linkPurpose). */
  links?: LinkTokens;
  /** Port tokens, for the guest ports' routes (config.portAccess), and where a request carries one. */
  ports?: PortTokenCheck;
  /** A cluster's node: its gateways authenticate clients, the node checks the gateway (cluster-identity.ts). */
  cluster?: ClusterAuth;
  /** The E2B surface's envd routes (config.e2b 'envd'); absent: they open with nothing. */
  envd?: EnvdTokenCheck;
}

/**
 * Open to anyone: the API description, and a live view's page, state, takeover button and
 * WebSocket, whose token in the path is their credential (checked by views/live-views.ts
 * before anything is served), with the page's static files (and the terminal page's).
 */
const OPEN_ROUTES = new Set([
  '/openapi.json',
  '/v1/views/:token',
  '/v1/views/:token/state',
  '/v1/views/:token/takeover',
  '/v1/views/:token/handback',
  '/v1/views/:token/rfb',
  '/v1/view-assets/*',
  '/v1/terminal-assets/*',
]);
/**
 * Open to anyone, but what they say depends on who asks: /healthz answers a bare liveness
 * probe with "ok" only, and says more to a caller with a key (routes/system.ts). A key,
 * when given, is checked as anywhere else.
 */
const KEY_OPTIONAL_ROUTES = new Set(['/healthz']);
/**
 * Open to clients on this machine (a Prometheus agent on the host scrapes without a key);
 * from elsewhere they need a key. The metrics are host-wide aggregates with no session or
 * tenant label. A reverse proxy on this host would make every client look local: do not
 * forward /metrics through one. A web page in a browser here is not "this machine": its
 * requests are refused by their Host, Origin or Sec-Fetch-Site (browser-guard.ts).
 */
const LOCAL_ROUTES = new Set(['/metrics']);

/**
 * Authentication as one onRequest hook on the root instance, so it runs before body
 * parsing (an unauthenticated client cannot make the server read a large body) and covers
 * every route, including ones added later, unless listed above: fail closed.
 * A small hook rather than @fastify/bearer-auth: keys are looked up by id in the store and
 * compared as SHA-256 digests with timingSafeEqual, and the answer must distinguish
 * expired and revoked keys and bind the tenant to the request; the plugin's model (a set of
 * raw keys in memory, compared as given) fits none of that.
 * `request.tenant` stays '' for an anonymous request on an open route.
 */
export function installAuth(app: FastifyInstance, opts: AuthOptions): void {
  app.decorateRequest('tenant', '');
  app.decorateRequest('apiKeyId', null);
  app.decorateRequest('placedSessionId', null);
  app.decorateRequest('clientAddress', '');
  app.addHook('onRequest', async (request, reply) => {
    const route = request.routeOptions.url;
    request.clientAddress = request.socket.remoteAddress ?? '';
    if (opts.cluster) {
      identifyGatewayRequest(request, reply, opts, opts.cluster);
      return;
    }
    if (route !== undefined && OPEN_ROUTES.has(route)) return;
    if (request.routeOptions.config.e2b === 'envd') {
      // Fail closed: without the check wired in, an envd route opens for nobody.
      if (!opts.envd) throw missingKeyError();
      request.tenant = opts.envd.verify(request);
      bindRequestLog(request, reply, { tenant: request.tenant });
      return;
    }
    const hasKey = request.headers.authorization !== undefined || e2bApiKey(request) !== undefined;
    if (!hasKey && route !== undefined && LOCAL_ROUTES.has(route) && isLoopbackAddress(request.socket.remoteAddress ?? '')) {
      assertNotFromAWebPage(request.headers, request.socket.localPort);
      return;
    }
    if (!hasKey && route !== undefined && KEY_OPTIONAL_ROUTES.has(route) && !keylessCaller(request, opts)) return;
    if (!hasKey && opts.links && linkTokenOf(request) !== undefined) {
      openWithLink(request, reply, !opts.requirement.keysRequired(), opts.links);
      return;
    }
    if (!hasKey && opts.ports && openWithPortToken(request, reply, opts.ports)) return;
    const identity = identify(request, opts);
    request.tenant = identity.tenant;
    request.apiKeyId = identity.keyId ?? null;
    bindRequestLog(request, reply, identity.keyId ? { tenant: identity.tenant, keyId: identity.keyId } : { tenant: identity.tenant });
  });
}

/**
 * On a cluster's node every request comes from a gateway, but a bare liveness probe (the
 * orchestrator's own kubelet), which hears only "ok", and /metrics from this machine.
 * The gateway names the tenant it authenticated; open routes and link-token pages are
 * checked here as on a single host (their token is their credential).
 */
function identifyGatewayRequest(request: FastifyRequest, reply: FastifyReply, opts: AuthOptions, cluster: ClusterAuth): void {
  const route = request.routeOptions.url;
  const bare = request.headers.authorization === undefined && request.headers[CLUSTER_SECRET_HEADER] === undefined;
  if (bare && route !== undefined && KEY_OPTIONAL_ROUTES.has(route)) return;
  if (bare && route !== undefined && LOCAL_ROUTES.has(route) && isLoopbackAddress(request.socket.remoteAddress ?? '')) return;
  assertFromGateway(request, cluster);
  request.clientAddress = forwardedClient(request) ?? request.clientAddress;
  if (route !== undefined && OPEN_ROUTES.has(route)) return;
  const identity = gatewayIdentity(request);
  if (request.routeOptions.config.e2b === 'envd') {
    // The sandbox's access token is the credential here as on a single host, and its sandbox
    // must be the tenant's the gateway authenticated (a gateway checked the tenant of the
    // session its route named, not of the sandbox an E2b-Sandbox-Id header names).
    if (!opts.envd) throw missingKeyError();
    const tenant = opts.envd.verify(request);
    if (identity && identity.tenant !== tenant) throw new NotFoundError(`sandbox ${String((request.params as { id?: unknown }).id)} not found`);
    request.tenant = tenant;
    bindRequestLog(request, reply, { tenant });
    return;
  }
  if (identity) {
    request.tenant = identity.tenant;
    request.apiKeyId = identity.keyId ?? null;
    request.placedSessionId = placedSessionId(request) ?? null;
    bindRequestLog(request, reply, identity.keyId ? { tenant: identity.tenant, keyId: identity.keyId } : { tenant: identity.tenant });
    return;
  }
  if (opts.links && linkTokenOf(request) !== undefined) {
    openWithLink(request, reply, false, opts.links);
    return;
  }
  if (opts.ports && openWithPortToken(request, reply, opts.ports)) return;
  if (route !== undefined && (KEY_OPTIONAL_ROUTES.has(route) || LOCAL_ROUTES.has(route))) return;
  throw missingKeyError();
}

/** The ?token= of a route that opens with a link token, if it has one. */
function linkTokenOf(request: FastifyRequest): string | undefined {
  if (request.routeOptions.config.linkPurpose === undefined) return undefined;
  const token = (request.query as { token?: unknown } | undefined)?.token;
  return typeof token === 'string' ? token : undefined;
}

/**
 * A page opened with a link token: the token names the tenant, and opens only its own
 * session's route of its purpose. Without keys (local development) a web page elsewhere must
 * still not drive this server, token or not: the browser guard applies as to any keyless call.
 * The token is never logged: the request log names the route pattern, not the URL.
 */
function openWithLink(request: FastifyRequest, reply: FastifyReply, keyless: boolean, links: LinkTokens): void {
  if (keyless) assertNotFromAWebPage(request.headers, request.socket.localPort);
  const sessionId = (request.params as { id?: unknown }).id;
  const purpose = request.routeOptions.config.linkPurpose as LinkPurpose;
  const link = links.verify(linkTokenOf(request) as string, typeof sessionId === 'string' ? sessionId : '', purpose);
  request.tenant = link.tenant;
  bindRequestLog(request, reply, { tenant: link.tenant, linkId: link.id });
}

/**
 * A guest port's request with a port token (in ?sbx_token= or its cookie): the token names the
 * tenant and opens only its own session's port. Its own kind: a link or view token is no port
 * token, and a port token opens no other route. No browser guard: like a live view's token,
 * the token is the credential, and a port's host-based name is never a loopback name.
 * False when the request carries no token (the API key, or keyless, then decides).
 */
function openWithPortToken(request: FastifyRequest, reply: FastifyReply, ports: PortTokenCheck): boolean {
  if (request.routeOptions.config.portAccess !== true) return false;
  const token = ports.presented(request);
  if (token === undefined) return false;
  const params = request.params as { id?: unknown; port?: unknown };
  const port = typeof params.port === 'string' && /^[0-9]{1,5}$/.test(params.port) ? Number(params.port) : 0;
  const grant = ports.verify(token, typeof params.id === 'string' ? params.id : '', port);
  request.tenant = grant.tenant;
  bindRequestLog(request, reply, { tenant: grant.tenant, portTokenId: grant.id });
  return true;
}

/** A key, when one is given, is always checked, even where none is required. */
function identify(request: FastifyRequest, opts: AuthOptions): Identity {
  const header = request.headers.authorization;
  if (header !== undefined) return verifyAuthorization(header, opts.keys);
  const e2bKey = e2bApiKey(request);
  if (e2bKey !== undefined) return verifyAuthorization(`Bearer ${e2bKey}`, opts.keys);
  if (opts.requirement.keysRequired()) throw missingKeyError();
  // Keyless: trusted because it comes from this machine, so it must not come from a web page.
  assertNotFromAWebPage(request.headers, request.socket.localPort);
  return { tenant: LOCAL_TENANT, keyId: undefined };
}

/** Would a request without a key be served as tenant "local" (no error thrown)? */
function keylessCaller(request: FastifyRequest, opts: AuthOptions): boolean {
  if (opts.requirement.keysRequired()) return false;
  try {
    assertNotFromAWebPage(request.headers, request.socket.localPort);
    return true;
  } catch {
    return false;
  }
}

/** The E2B SDK's X-API-Key on an E2B control-plane route (one of our keys, checked as a Bearer one). */
function e2bApiKey(request: FastifyRequest): string | undefined {
  if (request.routeOptions.config.e2b !== 'api-key') return undefined;
  const key = request.headers['x-api-key'];
  return typeof key === 'string' ? key.trim() : undefined;
}
