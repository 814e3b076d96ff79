import type { FastifyInstance } from 'fastify';
import type { Metrics } from '../../metrics/metrics.js';
import type { SessionManager } from '../../sessions/manager.js';

/** Health, Prometheus metrics and the OpenAPI document. */
export async function systemRoutes(app: FastifyInstance, opts: { manager: SessionManager; metrics: Metrics }): Promise<void> {
  app.get(
    '/healthz',
    {
      schema: {
        summary: 'Liveness and a short summary',
        tags: ['system'],
        response: {
          200: {
            type: 'object',
            properties: { status: { type: 'string' }, runtime: { type: 'string' }, sessions: { type: 'integer' } },
          },
        },
      },
    },
    async () => ({ status: 'ok', runtime: opts.manager.runtimeName, sessions: opts.manager.list().length }),
  );

  app.get('/metrics', { schema: { summary: 'Prometheus metrics (text exposition format)', tags: ['system'] } }, async (_request, reply) => {
    const body = await opts.metrics.registry.metrics();
    return reply.type(opts.metrics.registry.contentType).send(body);
  });

  app.get('/openapi.json', { schema: { hide: true } }, async () => app.swagger());
}
