/**
 * The session routes on a gateway: create (placed, then forwarded), list (every healthy
 * node's, merged, with the directory's lost sessions), and every route under
 * /v1/sessions/:id, forwarded to the session's node after the directory's tenant check.
 */
import type { FastifyInstance, FastifyRequest } from 'fastify';
import { SMALL_BODY_LIMIT_BYTES } from '../../api/limits.js';
import { upgradeSocketOf } from '../../api/upgrade-socket.js';
import { createSessionBody } from '../../api/schemas.js';
import { SESSION_ID_PATTERN } from '../../network/names.js';
import type { CreateSessionOptions } from '../../sessions/session-request.js';
import type { ClusterState } from './cluster-state.js';
import { placeCreate, type CreateDeps } from './create.js';
import { familyOf, type Forwarder } from './forward.js';
import type { InFlight } from './in-flight.js';
import { nodeUrl, type NodeAnswer } from './node-client.js';
import { ACCEPT_POOLED_ID_HEADER, nodeHeaders } from './node-headers.js';
import type { Router } from './router.js';
import { viewTokenHash } from './router.js';
import { forwardUpgrade } from './upgrade-proxy.js';

export interface SessionRouteDeps extends CreateDeps {
  readonly secret: string;
  readonly inFlight: InFlight;
  readonly router: Router;
  readonly forwarder: Forwarder;
}

/** Headers of a JSON request the gateway sends itself, on the caller's behalf. */
export function jsonHeaders(request: FastifyRequest, secret: string, body: Buffer | undefined, sessionId?: string): Record<string, string | string[]> {
  const headers = nodeHeaders(request, request.headers, { secret, tenant: request.tenant, keyId: request.apiKeyId, ...(sessionId ? { sessionId } : {}) });
  delete headers['content-length'];
  delete headers['content-type'];
  if (body !== undefined) {
    headers['content-type'] = 'application/json';
    headers['content-length'] = String(body.length);
  }
  return headers;
}

/** JSON routes (create, list): fastify's own parser and the node's schema, so a bad body is the same 400. */
export async function sessionJsonRoutes(app: FastifyInstance, deps: SessionRouteDeps): Promise<void> {
  app.post<{ Body: CreateSessionOptions }>(
    '/v1/sessions',
    { bodyLimit: SMALL_BODY_LIMIT_BYTES, schema: { body: createSessionBody } },
    async (request, reply) => {
      const body = Buffer.from(JSON.stringify(request.body ?? {}));
      const answer = await placeCreate(deps, {
        tenant: request.tenant,
        template: request.body?.template,
        path: '/v1/sessions',
        // The node may answer from its warm pool, under the pooled sandbox's own id.
        headers: (sessionId) => ({ ...jsonHeaders(request, deps.secret, body, sessionId), [ACCEPT_POOLED_ID_HEADER]: '1' }),
        body,
        answeredId: sessionIdOf,
        volumes: request.body?.volumes,
      });
      return sendAnswer(reply, answer);
    },
  );

  app.get('/v1/sessions', async (request) => ({ sessions: await listSessions(request, deps) }));
}

/**
 * Everything under /v1/sessions/:id: bodies stream through unparsed (uploads of any size), and
 * HTTP upgrades (guest ports' and processes' WebSockets) are joined to the node's
 * (upgrade-proxy.ts). Registered before @fastify/websocket, which would otherwise answer an
 * upgrade of a route it does not own by completing it itself and closing the socket.
 */
export async function sessionProxyRoutes(app: FastifyInstance, deps: SessionRouteDeps): Promise<void> {
  const { router, forwarder, state } = deps;
  const proxy = async (request: FastifyRequest<{ Params: { id: string; '*'?: string } }>, reply: import('fastify').FastifyReply) => {
    const { id } = request.params;
    const rest = request.params['*'];
    const target = await router.session(request, id);
    const family = familyOf(request) ?? 'sessions';
    const tenant = request.viaLink ? undefined : request.tenant;
    const upgrade = upgradeSocketOf(request);
    if (upgrade) {
      const { settings, metrics, inFlight, secret } = deps;
      return forwardUpgrade(request, reply, target, upgrade, {
        secret,
        family,
        tenant,
        connectTimeoutMs: settings.nodeConnectTimeoutMs,
        answerTimeoutMs: settings.nodeAnswerTimeoutMs,
        metrics,
        inFlight,
      });
    }
    if (request.method === 'POST' && rest === 'views') {
      return forwarder.forward(request, reply, target, { family, tenant, sessionId: id, inspect: (status, body) => recordView(state, id, status, body) });
    }
    if (request.method === 'DELETE' && rest === undefined) {
      return forwarder.forward(request, reply, target, { family, tenant, sessionId: id, inspect: (status) => recordEnd(deps, id, status) });
    }
    return forwarder.forward(request, reply, target, { family, tenant, sessionId: id });
  };
  app.all('/v1/sessions/:id', proxy);
  app.all('/v1/sessions/:id/*', proxy);
}

/**
 * A session destroyed through this gateway counts on its node no more, at once (its node
 * would say so at its next heartbeat: until then, a create could find the node fuller than
 * it is). A failure to say it is logged, never the client's answer: the heartbeat says it.
 */
async function recordEnd(deps: SessionRouteDeps, sessionId: string, status: number): Promise<void> {
  if (status !== 200) return;
  await deps.state
    .call('end', (store) => store.end(sessionId))
    .catch((err: unknown) => deps.logger.warn({ err, sessionId }, 'could not end a destroyed session in the directory (its node will)'));
}

/** A live view made through this gateway: its token will route to this session from any gateway. */
async function recordView(state: ClusterState, sessionId: string, status: number, body: Buffer): Promise<void> {
  if (status !== 201) return;
  const view = JSON.parse(body.toString('utf8')) as { url?: unknown; expiresAt?: unknown };
  const token = typeof view.url === 'string' ? /\/v1\/views\/([^/?#]+)$/.exec(view.url)?.[1] : undefined;
  if (token === undefined) return;
  const expiresAt = typeof view.expiresAt === 'string' ? new Date(view.expiresAt) : new Date(Date.now() + 86_400_000);
  await state.call('recordViewToken', (store) => store.recordViewToken(viewTokenHash(token), sessionId, expiresAt));
}

/** The id of a created session, from the node's 201 (a session's view); undefined if it names none. */
function sessionIdOf(answer: NodeAnswer): string | undefined {
  try {
    const id = (JSON.parse(answer.body.toString('utf8')) as { id?: unknown }).id;
    return typeof id === 'string' && SESSION_ID_PATTERN.test(id) ? id : undefined;
  } catch {
    return undefined;
  }
}

/** The node's answer, as the node gave it (status, content type, body). */
export function sendAnswer(reply: import('fastify').FastifyReply, answer: NodeAnswer): import('fastify').FastifyReply {
  for (const name of ['content-type', 'cache-control', 'retry-after', 'www-authenticate']) {
    const value = answer.headers[name];
    if (value !== undefined) void reply.header(name, value);
  }
  return reply.status(answer.status).send(answer.body);
}

/** A node's session list is read from memory: one that takes longer is not answering. */
const LIST_TIMEOUT_MS = 5_000;

type Listed = { id: string; createdAt?: string } & Record<string, unknown>;

/**
 * The caller's sessions: every healthy node's list for this tenant, merged in order of
 * creation, and the directory's sessions of this tenant on lost nodes, as `lost`. A node
 * that does not answer within LIST_TIMEOUT_MS is left out (logged): it is about to be lost.
 */
async function listSessions(request: FastifyRequest, deps: SessionRouteDeps): Promise<Listed[]> {
  const { state, client, secret, logger } = deps;
  const nodes = await state.nodes();
  const headers = jsonHeaders(request, secret, undefined);
  const lists = await Promise.all(
    nodes
      .filter((node) => node.state === 'up')
      .map((node) =>
        client
          .request({ method: 'GET', url: nodeUrl(node.url, '/v1/sessions'), headers, node: node.name, timeoutMs: LIST_TIMEOUT_MS })
          .then((answer) => (answer.status === 200 ? ((JSON.parse(answer.body.toString('utf8')) as { sessions?: Listed[] }).sessions ?? []) : []))
          .catch((err: unknown) => {
            logger.warn({ err, node: node.name }, 'a node did not answer the session list');
            return [] as Listed[];
          }),
      ),
  );
  const lost = await Promise.all(
    nodes
      .filter((node) => node.state === 'lost')
      .map(async (node) =>
        (await state.call('sessionsOfNode', (store) => store.sessionsOfNode(node.name))).filter(
          (entry) => entry.tenant === request.tenant && entry.state !== 'ended',
        ),
      ),
  );
  const merged: Listed[] = lists.flat();
  for (const entry of lost.flat()) {
    merged.push({
      id: entry.sessionId,
      tenant: entry.tenant,
      state: 'lost',
      createdAt: entry.createdAt.toISOString(),
      error: entry.reason ?? `its node ${entry.node} was lost`,
    });
  }
  return merged.sort((a, b) => String(a.createdAt ?? '').localeCompare(String(b.createdAt ?? '')));
}
