import type { FastifyInstance } from 'fastify';
import type { SessionManager } from '../../sessions/manager.js';

/**
 * POST /v1/sessions/:id/tools/bash and /tools/str_replace_based_edit_tool: the companion
 * tools of the computer-use loop, over the session's SSH connection.
 * (To be written: see src/tools/bash and src/tools/editor.)
 */
export async function companionToolRoutes(_app: FastifyInstance, _opts: { manager: SessionManager }): Promise<void> {}
