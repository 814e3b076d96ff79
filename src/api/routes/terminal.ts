import type { FastifyInstance } from 'fastify';
import type { GuestProcess } from '../../processes/guest-process.js';
import { dimension } from '../../processes/process-request.js';
import type { ProcessTable } from '../../processes/process-table.js';
import { loadTerminalAssets } from '../../views/terminal-assets.js';
import { TERMINAL_ASSETS_PREFIX, TERMINAL_PAGE_HEADERS, terminalPage } from '../../views/terminal-page.js';
import { sendError } from '../errors.js';
import { sessionIdParams } from '../schemas.js';
import { followOverSocket } from './process-socket.js';

export interface TerminalRouteOptions {
  /** The session's process table (404/409/410 for a session that is not there or not running). */
  processes(sessionId: string): Promise<ProcessTable>;
  /** Whether a terminal link still opens the session (not revoked, not expired); absent without links. */
  linkStillOpens?: (token: string, sessionId: string) => boolean;
}

/** How often an open terminal's link is checked again: a revoked or expired link's shell ends within this. */
export const LINK_RECHECK_MS = 2_000;

const tokenQuery = { token: { type: 'string', maxLength: 128, description: 'A link token of purpose "terminal" (POST /v1/sessions/:id/links)' } };

/**
 * A terminal in the browser (docs/api.md#terminal): GET /v1/sessions/:id/terminal is the page,
 * opened with a link token of purpose `terminal` (a browser cannot send the API key); its
 * WebSocket .../terminal/ws starts a login shell in a pseudo-terminal as the sandbox user and
 * speaks the process socket's protocol; closing the socket ends the shell, as closing a
 * terminal window does. A terminal link is a shell in the sandbox: give it as you would the key.
 */
export async function terminalRoutes(app: FastifyInstance, opts: TerminalRouteOptions): Promise<void> {
  const assets = loadTerminalAssets();
  // The table each admitted upgrade found, from preValidation to the handler.
  const found = new WeakMap<object, ProcessTable>();

  app.get<{ Params: { id: string }; Querystring: { token?: string } }>(
    '/v1/sessions/:id/terminal',
    {
      config: { linkPurpose: 'terminal' },
      schema: {
        summary: 'A terminal page (xterm.js) with a login shell in the sandbox, for a browser holding a terminal link',
        tags: ['processes'],
        params: sessionIdParams,
        querystring: { type: 'object', additionalProperties: false, properties: tokenQuery },
      },
    },
    async (request, reply) => {
      await opts.processes(request.params.id); // a session that is not running is its HTTP error, not a page that cannot connect
      return reply.headers(TERMINAL_PAGE_HEADERS).type('text/html; charset=utf-8').send(terminalPage(request.params.id));
    },
  );

  app.get<{ Params: { id: string }; Querystring: { token?: string; cols?: string; rows?: string } }>(
    '/v1/sessions/:id/terminal/ws',
    {
      websocket: true,
      config: { linkPurpose: 'terminal' },
      schema: {
        summary: "WebSocket: a new login shell in a pty; the process socket's protocol (output frames out, input and resize messages in)",
        tags: ['processes'],
        params: sessionIdParams,
        querystring: {
          type: 'object',
          additionalProperties: false,
          properties: { ...tokenQuery, cols: { type: 'string', pattern: '^[0-9]{1,4}$' }, rows: { type: 'string', pattern: '^[0-9]{1,4}$' } },
        },
      },
      // Before the upgrade: a session that is not there (or not this tenant's) is an HTTP error, never a socket.
      preValidation: async (request) => {
        found.set(request.raw, await opts.processes(request.params.id));
      },
    },
    async (socket, request) => {
      const table = found.get(request.raw);
      found.delete(request.raw);
      // Listened to from the start: a client's broken frame while the shell starts must not throw.
      socket.on('error', () => undefined);
      if (!table) return socket.close(1011, 'no session');
      let shell: GuestProcess;
      try {
        const size = { cols: dimension(Number(request.query.cols ?? 80), 'cols'), rows: dimension(Number(request.query.rows ?? 24), 'rows') };
        shell = await table.start({ argv: ['bash', '-l'], env: [['TERM', 'xterm-256color']], stdin: true, pty: size });
      } catch (err) {
        return socket.close(1011, (err as Error).message.slice(0, 120));
      }
      if (socket.readyState !== socket.OPEN) return void shell.kill().catch(() => undefined);
      socket.on('close', () => void shell.kill().catch(() => undefined));
      followOverSocket(socket, shell, 0);
      // The link was checked at the upgrade; a shell must not outlive it (its revoke or its expiry).
      const token = request.query.token;
      const stillOpens = opts.linkStillOpens;
      if (token !== undefined && stillOpens) {
        const recheck = setInterval(() => {
          if (!stillOpens(token, request.params.id)) socket.close(1008, 'the terminal link was revoked or has expired');
        }, LINK_RECHECK_MS);
        recheck.unref();
        socket.once('close', () => clearInterval(recheck));
      }
    },
  );

  app.get<{ Params: { '*': string } }>(`${TERMINAL_ASSETS_PREFIX}/*`, { schema: { hide: true } }, async (request, reply) => {
    const asset = assets.get(request.params['*']);
    if (!asset) return sendError(reply, 'not_found', 'no such file');
    return reply.type(asset.contentType).header('cache-control', 'public, max-age=3600').header('x-content-type-options', 'nosniff').send(asset.body);
  });
}
