/**
 * The gateway's own system routes: /healthz says whether the gateway reaches the cluster's
 * state (200, else 503 with the reason: a load balancer takes the gateway out), /metrics are
 * the gateway's (metrics.ts); the API description and the template list are a node's.
 */
import type { FastifyInstance } from 'fastify';
import type { GatewayMetrics } from './metrics.js';
import { nodeUrl } from './node-client.js';
import { jsonHeaders, type SessionRouteDeps } from './session-routes.js';

export async function gatewaySystemRoutes(app: FastifyInstance, deps: SessionRouteDeps & { gatewayMetrics: GatewayMetrics }): Promise<void> {
  const { state, router, forwarder } = deps;
  app.get('/healthz', async (_request, reply) => {
    const reachable = await state.call('ping', (store) => store.ping()).catch(() => false);
    if (!reachable) {
      return reply
        .status(503)
        .send({ status: 'unavailable', reason: `the cluster's state (PostgreSQL) does not answer within ${deps.settings.storeTimeoutMs} ms` });
    }
    return { status: 'ok' };
  });

  app.get('/metrics', async (_request, reply) => {
    const body = await deps.gatewayMetrics.registry.metrics();
    return reply.type(deps.gatewayMetrics.registry.contentType).send(body);
  });

  app.get('/openapi.json', async (request, reply) => forwarder.forward(request, reply, await router.anyNode(), { family: 'other' }));
  // The cluster's templates: each up node's list merged by name (built where any node built it).
  app.get('/v1/templates', async (request) => {
    const nodes = (await state.nodes()).filter((node) => node.state === 'up');
    if (nodes.length === 0) await router.anyNode(); // the 503 of an empty cluster
    const headers = jsonHeaders(request, deps.secret, undefined);
    const lists = await Promise.all(
      nodes.map((node) =>
        deps.client
          .request({ method: 'GET', url: nodeUrl(node.url, '/v1/templates'), headers, node: node.name, timeoutMs: 5_000 })
          .then((answer) => (answer.status === 200 ? ((JSON.parse(answer.body.toString('utf8')) as { templates?: Template[] }).templates ?? []) : []))
          .catch(() => [] as Template[]),
      ),
    );
    const merged = new Map<string, Template>();
    for (const template of lists.flat()) {
      const seen = merged.get(template.name);
      if (!seen || (template.built === true && seen.built !== true)) merged.set(template.name, template);
    }
    return { templates: [...merged.values()] };
  });
}

type Template = { name: string; built?: boolean } & Record<string, unknown>;
