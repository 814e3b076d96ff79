import type { FastifyInstance } from 'fastify';
import type { Metrics } from '../../metrics/metrics.js';
import type { SystemStatus } from '../../sessions/ports.js';

/** Health, Prometheus metrics and the OpenAPI document. */
export async function systemRoutes(app: FastifyInstance, opts: { manager: SystemStatus; metrics: Metrics }): Promise<void> {
  app.get(
    '/healthz',
    {
      schema: {
        summary: "Liveness; with an API key (or keyless on loopback), also the runtime and the caller's own session count",
        tags: ['system'],
        response: {
          200: {
            type: 'object',
            required: ['status'],
            properties: {
              status: { type: 'string' },
              runtime: { type: 'string' },
              sessions: { type: 'integer', description: "the caller's tenant's sessions, not the host's" },
            },
          },
        },
      },
    },
    // Anonymous (a load balancer's probe, anyone who can reach the port): "ok" and nothing
    // else, so the host's activity cannot be watched from outside. A tenant learns only
    // about itself: another tenant's sessions are not its business either.
    async (request) => {
      if (request.tenant === '') return { status: 'ok' };
      return { status: 'ok', runtime: opts.manager.runtimeName, sessions: opts.manager.list(request.tenant).length };
    },
  );

  app.get('/metrics', { schema: { summary: 'Prometheus metrics (text exposition format)', tags: ['system'] } }, async (_request, reply) => {
    const body = await opts.metrics.registry.metrics();
    return reply.type(opts.metrics.registry.contentType).send(body);
  });

  app.get('/openapi.json', { schema: { hide: true } }, async () => app.swagger());
}
