import type { FastifyInstance } from 'fastify';

export interface PausedSessions {
  /** Resumes a paused session (autoResume) or throws 409 session_paused; nothing for a running one. */
  ensureRunning(id: string): Promise<void>;
}

/** Routes under /v1/sessions/:id that only look at a session, or pause and resume it: they never resume it first. */
const LOOKS_ONLY = new Set(['/v1/sessions/:id', '/v1/sessions/:id/pause', '/v1/sessions/:id/resume', '/v1/sessions/:id/health']);
const LOOKS_ONLY_GETS = ['/v1/sessions/:id/recording', '/v1/sessions/:id/trajectory', '/v1/sessions/:id/links', '/v1/sessions/:id/views'];

/**
 * Any other request to a paused session resumes it first (its autoResume, default on) or is
 * answered 409 session_paused, in one place for every session route (and the MCP tools, which
 * call them): after the tenant scope (another tenant's paused session stays a 404) and after
 * validation (a bad request resumes nothing).
 */
export function installAutoResume(app: FastifyInstance, sessions: PausedSessions): void {
  app.addHook('preHandler', async (request) => {
    const url = request.routeOptions.url;
    if (!url?.startsWith('/v1/sessions/:id')) return;
    // GET and DELETE of the session itself look (or end it); its PATCH changes its clocks, which resumes it.
    if (LOOKS_ONLY.has(url) && !(url === '/v1/sessions/:id' && request.method === 'PATCH')) return;
    if (request.method === 'GET' && LOOKS_ONLY_GETS.some((prefix) => url.startsWith(prefix))) return;
    const id = (request.params as { id?: unknown }).id;
    if (typeof id === 'string') await sessions.ensureRunning(id);
  });
}
