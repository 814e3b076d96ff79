import type { FastifyInstance } from 'fastify';
import { NotFoundError } from '../../errors.js';
import { bindRequestLog } from '../logging/request-log.js';

export interface SessionOwners {
  /** The tenant of a session (live or stored), or undefined if there is no such session. */
  tenantOf(id: string): string | undefined;
}

/**
 * Every route under /v1/sessions/:id (get, destroy, health, actions, tools, files,
 * screenshot, and any added later) is scoped to the request's tenant here, in one place,
 * before the body is read. Another tenant's session answers exactly as a session that does
 * not exist (404, same message): a tenant cannot even learn that an id is taken.
 */
export function installTenantScope(app: FastifyInstance, owners: SessionOwners): void {
  app.addHook('onRequest', async (request, reply) => {
    if (!request.routeOptions.url?.startsWith('/v1/sessions/:id')) return;
    const id = (request.params as { id?: unknown }).id;
    if (typeof id !== 'string') return;
    const owner = owners.tenantOf(id);
    if (owner !== undefined && owner !== request.tenant) throw new NotFoundError(`session ${id} does not exist`);
    // Only once the session is known to be the tenant's: its log lines carry its id.
    if (owner !== undefined) bindRequestLog(request, reply, { sessionId: id });
  });
}
