/**
 * The gateway's own system routes: /healthz says whether the gateway reaches the cluster's
 * state (200, else 503 with the reason: a load balancer takes the gateway out), /metrics are
 * the gateway's (metrics.ts); the API description and the template list are a node's.
 */
import type { FastifyInstance } from 'fastify';
import type { GatewayMetrics } from './metrics.js';
import type { SessionRouteDeps } from './session-routes.js';

export async function gatewaySystemRoutes(app: FastifyInstance, deps: SessionRouteDeps & { gatewayMetrics: GatewayMetrics }): Promise<void> {
  const { state, router, forwarder } = deps;
  app.get('/healthz', async (_request, reply) => {
    const reachable = await state.call('ping', (store) => store.ping()).catch(() => false);
    if (!reachable) {
      return reply.status(503).send({ status: 'unavailable', reason: `the cluster's state (PostgreSQL) does not answer within ${deps.settings.storeTimeoutMs} ms` });
    }
    return { status: 'ok' };
  });

  app.get('/metrics', async (_request, reply) => {
    const body = await deps.gatewayMetrics.registry.metrics();
    return reply.type(deps.gatewayMetrics.registry.contentType).send(body);
  });

  app.get('/openapi.json', async (request, reply) => forwarder.forward(request, reply, await router.anyNode(), { family: 'other' }));
  app.get('/v1/templates', async (request, reply) => forwarder.forward(request, reply, await router.anyNode(), { family: 'other', tenant: request.tenant }));
}
