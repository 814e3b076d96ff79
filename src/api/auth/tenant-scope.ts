import type { FastifyInstance } from 'fastify';
import { NotFoundError } from '../../errors.js';
import { SESSION_ID_PATTERN } from '../../network/names.js';
import { bindRequestLog } from '../logging/request-log.js';

export interface SessionOwners {
  /** The tenant of a session (live or stored), or undefined if there is no such row. */
  tenantOf(id: string): string | undefined;
  /**
   * The tenants that what is kept of a session names as its owner (its recording's metadata,
   * its trajectory, its links): asked only once the session has no row, since rows are pruned
   * a day after the end and these are kept for days. Empty: nothing of it is kept.
   */
  keptOwners(id: string): Promise<string[]>;
}

/**
 * Every route under /v1/sessions/:id (get, destroy, health, actions, tools, files,
 * screenshot, recording, trajectory, links, and any added later) is scoped to the request's
 * tenant here, in one place, before the body is read. Another tenant's session answers
 * exactly as a session that does not exist (404, same message): a tenant cannot even learn
 * that an id is taken. The owner is the session's row, else every owner its kept artifacts
 * store: pruning a row never opens what was kept of it to another tenant. An id of our shape
 * that nothing is known of answers the same 404, so that another tenant's refused request and
 * a made-up id look alike on every route (a malformed id goes on to the schema's 400).
 */
export function installTenantScope(app: FastifyInstance, owners: SessionOwners): void {
  app.addHook('onRequest', async (request, reply) => {
    if (!request.routeOptions.url?.startsWith('/v1/sessions/:id')) return;
    const id = (request.params as { id?: unknown }).id;
    if (typeof id !== 'string') return;
    const owner = owners.tenantOf(id);
    const kept = owner === undefined ? await owners.keptOwners(id) : [];
    const unknown = owner === undefined && kept.length === 0 && SESSION_ID_PATTERN.test(id);
    if (unknown || (owner !== undefined && owner !== request.tenant) || kept.some((tenant) => tenant !== request.tenant)) {
      throw new NotFoundError(`session ${id} does not exist`);
    }
    // Only once the session is known to be the tenant's: its log lines carry its id.
    if (owner !== undefined || kept.length > 0) bindRequestLog(request, reply, { sessionId: id });
  });
}
