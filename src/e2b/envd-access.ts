import path from 'node:path';
import type { FastifyRequest } from 'fastify';
import type { IncomingMessage } from 'node:http';
import { NotFoundError, OrchestratorError } from '../errors.js';
import { GUEST_USER } from '../guest/contract.js';
import { sandboxPath } from '../files/sandbox-path.js';
import { SESSION_ID_PATTERN } from '../network/names.js';
import { parsePortHost } from '../ports/port-address.js';
import { EnvdTokenError } from './errors.js';
import type { E2bSandboxStore } from './sandbox-store.js';

/** The port of E2B's in-sandbox API, as the SDK names it in hosts and headers. */
export const ENVD_PORT = 49983;
/** Where the envd routes live once routed: /e2b/envd/<sandbox id>/<envd's own path>. */
export const ENVD_PREFIX = '/e2b/envd';
const ENVD_PATHS = ['/process.Process/', '/filesystem.Filesystem/', '/files', '/health'];
const HOME = `/home/${GUEST_USER}`;

/**
 * Routes envd's calls to their routes, before fastify routes the request: by the SDK's
 * E2b-Sandbox-Id header (E2B_SANDBOX_URL pointing here: envd's own paths at the root), or by
 * its host form `49983-<id>.<domain>` (every path on that name is envd's, as every path on
 * another port's name is the guest's). Undefined: not an envd call.
 */
export function envdRewriter(domain: string | undefined): (req: IncomingMessage) => string | undefined {
  return (req) => {
    const url = req.url ?? '/';
    const byHost = domain ? parsePortHost(req.headers.host, domain) : undefined;
    if (byHost?.port === ENVD_PORT) return `${ENVD_PREFIX}/${byHost.sessionId}${url.startsWith('/') ? url : `/${url}`}`;
    // Another port's name is that guest port's, whatever a header says: its paths are the guest's.
    if (byHost) return undefined;
    const header = req.headers['e2b-sandbox-id'];
    if (typeof header !== 'string' || !ENVD_PATHS.some((p) => url.startsWith(p))) return undefined;
    // An id of another shape is routed as a made-up one: the token check answers 404.
    const id = SESSION_ID_PATTERN.test(header) ? header : '0000000000';
    return `${ENVD_PREFIX}/${id}${url}`;
  };
}

/**
 * The envd access token check, in the auth hook (before the body is read, before anything
 * reaches the guest): the sandbox must be one the E2B surface knows and live, and the
 * X-Access-Token its token. An unknown sandbox is a 404 (the SDK's NotFoundError), a wrong
 * token a 401 (its AuthenticationError), as E2B answers.
 */
export function envdTokenCheck(store: E2bSandboxStore, live: (id: string) => string | undefined): { verify(request: FastifyRequest): string } {
  return {
    verify(request) {
      const id = (request.params as { id?: unknown }).id;
      const tenant = typeof id === 'string' ? live(id) : undefined;
      const row = typeof id === 'string' && tenant !== undefined ? store.get(id) : undefined;
      if (typeof id !== 'string' || !row || row.tenant !== tenant) throw new NotFoundError(`sandbox ${String(id)} not found`);
      const token = request.headers['x-access-token'];
      if (typeof token !== 'string' || !store.verify(id, token)) throw new EnvdTokenError();
      return row.tenant;
    },
  };
}

/**
 * The user a call runs as: envd takes it from `Authorization: Basic <user:>` (or a `username`
 * query). Ours run as the sandbox's user only, never root: another name is refused.
 */
export function checkUser(request: FastifyRequest, fromQuery?: string): void {
  let user = fromQuery;
  const header = request.headers.authorization;
  if (user === undefined && typeof header === 'string' && /^basic /i.test(header)) {
    user = Buffer.from(header.slice(6).trim(), 'base64').toString('utf8').split(':')[0];
  }
  if (user !== undefined && user !== '' && user !== GUEST_USER) {
    throw new OrchestratorError('permission_denied', `user: commands and files run as "${GUEST_USER}" here, never as "${user.slice(0, 32)}"`);
  }
}

/** envd's path semantics: relative to the user's home, `~` for it; then checked as our API checks paths. */
export function envdPath(raw: unknown, field = 'path'): string {
  if (typeof raw !== 'string' || raw === '') throw new OrchestratorError('invalid_request', `${field} must be a non-empty string`);
  let full = raw;
  if (raw === '~' || raw.startsWith('~/')) full = HOME + raw.slice(1);
  else if (!raw.startsWith('/')) full = path.posix.join(HOME, raw);
  return sandboxPath(full, field);
}

export { HOME as ENVD_HOME };
