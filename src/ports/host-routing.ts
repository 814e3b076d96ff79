import type { IncomingMessage } from 'node:http';
import { parsePortHost, portPathPrefix } from './port-address.js';

/** The requests that came by a host-based name (their URL was rewritten to the path-based route). */
const HOST_BASED = new WeakSet<IncomingMessage>();

/**
 * Fastify's rewriteUrl for the host-based form: a request to `<port>-<id>.<domain>` is routed
 * as `/v1/sessions/<id>/ports/<port>/<its path>`, so that both forms share one route, its
 * authentication and its tenant check. Every path on such a name goes to the guest: the API
 * itself is never served on a name a guest's page owns.
 */
export function portHostRewriter(domain: string | undefined): ((req: IncomingMessage) => string) | undefined {
  if (domain === undefined) return undefined;
  return (req) => {
    const url = req.url ?? '/';
    const target = parsePortHost(req.headers.host, domain);
    if (!target) return url;
    HOST_BASED.add(req);
    return `${portPathPrefix(target.sessionId, target.port)}${url.startsWith('/') ? url : `/${url}`}`;
  };
}

/** Did this request come by a host-based name? (Its original path is `originalUrl`.) */
export function cameByHost(req: IncomingMessage): boolean {
  return HOST_BASED.has(req);
}
