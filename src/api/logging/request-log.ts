import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';

/**
 * Request logs. Fastify's own request logging is off (disableRequestLogging): its
 * "incoming request" line is written before any hook runs, so it could not carry the
 * tenant, and it prints the raw URL. Instead one line per request, at the end, from the
 * request's logger, which the auth and tenant hooks bind to `tenant`, `keyId` and
 * `sessionId`. It names the route pattern, not the URL (the session id is a field, the
 * query is left out), and of a body only what is safe: the action's name and the lengths
 * of typed text and shell commands, never their content.
 */
export function installRequestLog(app: FastifyInstance): void {
  app.addHook('onResponse', async (request, reply) => {
    request.log.info(
      {
        method: request.method,
        route: request.routeOptions.url ?? null,
        statusCode: reply.statusCode,
        ms: Math.round(reply.elapsedTime * 10) / 10,
        ...bodySummary(request.body),
      },
      'request completed',
    );
  });
}

/** Adds fields to every later log line of this request (its handler's, errors, the last). */
export function bindRequestLog(request: FastifyRequest, reply: FastifyReply, bindings: Record<string, string>): void {
  const child = request.log.child(bindings);
  request.log = child;
  reply.log = child;
}

/** What may be logged of a request body: names and lengths, never free text. */
export function bodySummary(body: unknown): Record<string, string | number> {
  if (typeof body !== 'object' || body === null || Buffer.isBuffer(body)) return {};
  const fields = body as Record<string, unknown>;
  const summary: Record<string, string | number> = {};
  if (typeof fields.action === 'string' && /^[a-z_]{1,32}$/.test(fields.action)) summary.action = fields.action;
  if (typeof fields.text === 'string') summary.textLength = fields.text.length;
  if (typeof fields.command === 'string') summary.commandLength = fields.command.length;
  return summary;
}
