/**
 * Who a request through a gateway acts for: the single host's rules (api/auth/
 * request-identity.ts), with the key's record read from the cluster's store. Keys are always
 * required: a gateway has no keyless local mode. Open routes are the same as on a node: the
 * API description, a live view's token routes and its static files (and the terminal page's); /healthz says more to a
 * caller with a key; /metrics is open to this machine; the pages a link token opens take it
 * in ?token= (the node that holds the session checks it, as it checks a view token).
 */
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { isLoopbackAddress } from '../../api/auth/auth-mode.js';
import { assertNotFromAWebPage } from '../../api/auth/browser-guard.js';
import { checkKeyRecord, missingKeyError, parseAuthorization } from '../../api/auth/verify-key.js';
import { bindRequestLog } from '../../api/logging/request-log.js';
import { PORT_TOKEN_QUERY, splitTokenCookie } from '../../ports/port-address.js';
import type { ClusterState } from './cluster-state.js';

/** Gateway routes whose credential is in the path (or that need none). */
const OPEN_ROUTES = new Set(['/openapi.json', '/v1/views/:token', '/v1/views/:token/*', '/v1/views/:token/rfb', '/v1/view-assets/*', '/v1/terminal-assets/*']);
const KEY_OPTIONAL_ROUTES = new Set(['/healthz']);
const LOCAL_ROUTES = new Set(['/metrics']);

/** The session routes that open with a link token (config.linkPurpose on the node's routes), as the rest of their path. */
const LINK_PAGES = /^(?:trajectory(?:\/view|\/steps\/[^/]+\/(?:screenshot|frame))?|recording(?:\/status)?|terminal(?:\/ws)?)$/;

declare module 'fastify' {
  interface FastifyRequest {
    /**
     * Opened by a token the node checks (no key): a link token in ?token=, or a guest port's
     * token (?sbx_token= or its cookie). The gateway checks no tenant: the node that holds the
     * session checks that the token opens it, as a single host does.
     */
    viaLink: boolean;
  }
}

/**
 * One onRequest hook on the root instance, before any body is read, failing closed: every
 * route needs a key unless listed above. Sets request.tenant and request.apiKeyId.
 */
export function installGatewayAuth(app: FastifyInstance, state: ClusterState): void {
  app.decorateRequest('tenant', '');
  app.decorateRequest('apiKeyId', null);
  app.decorateRequest('viaLink', false);
  app.addHook('onRequest', async (request, reply) => {
    const route = request.routeOptions.url;
    if (route !== undefined && OPEN_ROUTES.has(route)) return;
    const header = request.headers.authorization;
    if (header === undefined) {
      if (route !== undefined && LOCAL_ROUTES.has(route) && isLoopbackAddress(request.socket.remoteAddress ?? '')) {
        assertNotFromAWebPage(request.headers, request.socket.localPort);
        return;
      }
      if (route !== undefined && KEY_OPTIONAL_ROUTES.has(route)) return;
      if (opensWithLink(request) || opensWithPortToken(request)) {
        request.viaLink = true;
        return;
      }
      throw missingKeyError();
    }
    const presented = parseAuthorization(header);
    const record = presented.id === undefined ? undefined : await state.findKey(presented.id);
    const identity = checkKeyRecord(presented, record);
    request.tenant = identity.tenant;
    request.apiKeyId = identity.keyId ?? null;
    bindTenant(request, reply, identity.keyId ? { tenant: identity.tenant, keyId: identity.keyId } : { tenant: identity.tenant });
  });
}

/**
 * The tenant and key id on every later log line of the request: set on the request's own
 * logger (fastify makes one per request) rather than a child of it, which cost a logger a
 * request (a fifth of the gateway's own per-request CPU in a profile).
 */
function bindTenant(request: FastifyRequest, reply: FastifyReply, bindings: Record<string, string>): void {
  const log = request.log as FastifyRequest['log'] & { setBindings?: (bindings: Record<string, string>) => void };
  if (typeof log.setBindings === 'function' && reply.log === request.log) log.setBindings(bindings);
  else bindRequestLog(request, reply, bindings);
}

/** A GET of a page a link token opens, with the token in ?token=. */
function opensWithLink(request: FastifyRequest): boolean {
  if (request.routeOptions.url !== '/v1/sessions/:id/*' || (request.method !== 'GET' && request.method !== 'HEAD')) return false;
  const rest = (request.params as { '*'?: unknown })['*'];
  const token = (request.query as { token?: unknown } | undefined)?.token;
  return typeof rest === 'string' && LINK_PAGES.test(rest) && typeof token === 'string';
}

/** The rest of a guest port's path under its session: `ports/<port>` and anything after it. */
const PORT_PAGES = /^ports\/[0-9]{1,5}(?:\/|$)/;

/**
 * A request to a guest port (path- or host-based: both are routed as the path form) that
 * presents a port token, in ?sbx_token= or its cookie, whatever its shape: the node answers
 * a bad one exactly as a single host does (401 invalid_port_token), and never forwards it
 * to the guest.
 */
function opensWithPortToken(request: FastifyRequest): boolean {
  if (request.routeOptions.url !== '/v1/sessions/:id/*') return false;
  const rest = (request.params as { '*'?: unknown })['*'];
  if (typeof rest !== 'string' || !PORT_PAGES.test(rest)) return false;
  const query = (request.query as Record<string, unknown> | undefined)?.[PORT_TOKEN_QUERY];
  return typeof query === 'string' || splitTokenCookie(request.headers.cookie).token !== undefined;
}
