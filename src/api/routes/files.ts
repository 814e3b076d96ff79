import type { FastifyInstance } from 'fastify';
import type { SessionManager } from '../../sessions/manager.js';

/**
 * PUT/GET /v1/sessions/:id/files?path=: upload and download over SFTP on the session's
 * connection. (To be written: see src/files.)
 */
export async function fileRoutes(_app: FastifyInstance, _opts: { manager: SessionManager }): Promise<void> {}
