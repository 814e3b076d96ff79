import type { FastifyInstance, FastifyRequest } from 'fastify';
import { LOCAL_TENANT } from '../../sessions/session-record.js';
import { isLoopbackAddress, type AuthMode } from './auth-mode.js';
import type { KeyStore } from './key-store.js';
import { bindRequestLog } from '../logging/request-log.js';
import { missingKeyError, verifyAuthorization, type Identity } from './verify-key.js';

declare module 'fastify' {
  interface FastifyRequest {
    /** The tenant the request acts for; set by the auth hook before any handler runs. */
    tenant: string;
    /** The id of the API key used (null in keyless mode, and on open routes). */
    apiKeyId: string | null;
  }
}

export interface AuthOptions {
  keys: KeyStore;
  mode: AuthMode;
}

/** Open to anyone: liveness and the API description. */
const OPEN_ROUTES = new Set(['/healthz', '/openapi.json']);
/**
 * Open to clients on this machine (a Prometheus agent on the host scrapes without a key);
 * from elsewhere they need a key. The metrics are host-wide aggregates with no session or
 * tenant label. A reverse proxy on this host would make every client look local: do not
 * forward /metrics through one.
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
 */
export function installAuth(app: FastifyInstance, opts: AuthOptions): void {
  app.decorateRequest('tenant', '');
  app.decorateRequest('apiKeyId', null);
  app.addHook('onRequest', async (request, reply) => {
    const route = request.routeOptions.url;
    if (route !== undefined && OPEN_ROUTES.has(route)) return;
    if (route !== undefined && LOCAL_ROUTES.has(route) && isLoopbackAddress(request.socket.remoteAddress ?? '')) return;
    const identity = identify(request, opts);
    request.tenant = identity.tenant;
    request.apiKeyId = identity.keyId ?? null;
    bindRequestLog(request, reply, identity.keyId ? { tenant: identity.tenant, keyId: identity.keyId } : { tenant: identity.tenant });
  });
}

/** A key, when one is given, is always checked, even where none is required. */
function identify(request: FastifyRequest, opts: AuthOptions): Identity {
  const header = request.headers.authorization;
  if (header !== undefined) return verifyAuthorization(header, opts.keys);
  const keyless = opts.mode === 'keyless' || (opts.mode === 'keyless-while-no-keys' && !opts.keys.hasUnrevokedKeys());
  if (keyless) return { tenant: LOCAL_TENANT, keyId: undefined };
  throw missingKeyError();
}
