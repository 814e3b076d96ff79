/**
 * /v1/runs through a gateway. A run lives on the node of its session: a run on an existing
 * session goes to that session's node (after the tenant check); a run that makes its own
 * session is placed like a create, the node told the session id to use. The run's id is
 * recorded with its session on the 201, so /v1/runs/:id (its state, its event stream, its
 * stop) reaches it through any gateway.
 */
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { SMALL_BODY_LIMIT_BYTES } from '../../api/limits.js';
import { runBody } from '../../api/routes/runs.js';
import { NotFoundError } from '../../errors.js';
import type { RunRequest } from '../../runs/runs.js';
import { placeCreate } from './create.js';
import type { NodeAnswer } from './node-client.js';
import { nodeUrl } from './node-client.js';
import { jsonHeaders, sendAnswer, type SessionRouteDeps } from './session-routes.js';

/** POST /v1/runs: a JSON body checked by the node's own schema (the same 400s). */
export async function runJsonRoutes(app: FastifyInstance, deps: SessionRouteDeps): Promise<void> {
  const { state, router, client, secret } = deps;
  const recordRun = async (sessionId: string, answer: NodeAnswer) => {
    const run = JSON.parse(answer.body.toString('utf8')) as { id?: unknown };
    if (typeof run.id !== 'string') return;
    const runId = run.id;
    await state.call('recordRun', (store) => store.recordRun(runId, sessionId));
  };

  app.post<{ Body: RunRequest }>('/v1/runs', { bodyLimit: SMALL_BODY_LIMIT_BYTES, schema: { body: runBody } }, async (request, reply) => {
    const body = Buffer.from(JSON.stringify(request.body));
    const { sessionId } = request.body;
    if (sessionId === undefined) {
      const answer = await placeCreate(deps, {
        tenant: request.tenant,
        template: request.body.session?.template,
        path: '/v1/runs',
        headers: (placed) => jsonHeaders(request, secret, body, placed),
        body,
        onCreated: recordRun,
        volumes: request.body.session?.volumes,
      });
      return sendAnswer(reply, answer);
    }
    // Both given: the node's 400 says "give one", before it looks at the session.
    const entry = request.body.session !== undefined ? undefined : await state.lookup(sessionId);
    if (request.body.session === undefined && (!entry || entry.tenant !== request.tenant)) throw new NotFoundError(`session ${sessionId} does not exist`);
    const target = entry ? await router.nodeOf(entry) : await router.anyNode();
    const answer = await client.request({
      method: 'POST',
      url: nodeUrl(target.url, '/v1/runs'),
      headers: jsonHeaders(request, secret, body),
      body,
      node: target.name,
    });
    if (answer.status === 201 && entry) await recordRun(entry.sessionId, answer);
    return sendAnswer(reply, answer);
  });
}

/** /v1/runs/:id and below: forwarded, streamed (the events are Server-Sent Events). */
export async function runProxyRoutes(app: FastifyInstance, deps: SessionRouteDeps): Promise<void> {
  const proxy = async (request: FastifyRequest<{ Params: { id: string } }>, reply: FastifyReply) => {
    const target = await deps.router.run(request, request.params.id);
    return deps.forwarder.forward(request, reply, target, { family: 'runs', tenant: request.tenant });
  };
  app.all('/v1/runs/:id', proxy);
  app.all('/v1/runs/:id/*', proxy);
}
