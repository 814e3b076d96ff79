import type { FastifyInstance } from 'fastify';
import type { RunEvent } from '../../runs/run-loop.js';
import type { RunManager, RunRequest } from '../../runs/runs.js';
import { TOOL_VERSIONS } from '../../runs/tool-versions.js';
import { SMALL_BODY_LIMIT_BYTES } from '../limits.js';
import { createSessionBody } from '../schemas.js';
import { EventStream } from '../event-stream.js';
import type { StreamSlots } from '../stream-slots.js';

/** Bytes an SSE client may leave unread before it is dropped: a slow reader holds no more. */
const SSE_UNREAD_LIMIT_BYTES = 256 * 1024;

const errors = {
  400: { $ref: 'Error#' },
  401: { $ref: 'Error#' },
  404: { $ref: 'Error#' },
  409: { $ref: 'Error#' },
  429: { $ref: 'Error#' },
  503: { $ref: 'Error#' },
};
const runIdParams = { type: 'object', required: ['id'], properties: { id: { type: 'string', pattern: '^run_[0-9a-f]{24}$' } } } as const;

export const runBody = {
  type: 'object',
  additionalProperties: false,
  required: ['task'],
  properties: {
    task: { type: 'string', minLength: 1, maxLength: 20_000, description: 'What the model is asked to do' },
    model: { type: 'string', minLength: 1, maxLength: 100, pattern: '^[A-Za-z0-9._:@-]+$' },
    toolVersion: { type: 'string', enum: [...TOOL_VERSIONS], description: "Default: the session's" },
    maxSteps: { type: 'integer', minimum: 1, maximum: 1000 },
    maxSeconds: { type: 'integer', minimum: 1, maximum: 86_400 },
    maxTokens: { type: 'integer', minimum: 1, maximum: 100_000_000 },
    sessionId: { type: 'string', minLength: 1, maxLength: 64 },
    session: createSessionBody,
    system: { type: 'string', maxLength: 20_000, description: 'Added to the system prompt' },
  },
} as const;

/**
 * /v1/runs: the built-in Claude loop. A run belongs to the tenant that made it; another
 * tenant's answers as one that does not exist.
 */
export async function runRoutes(app: FastifyInstance, opts: { runs: RunManager; streams: StreamSlots }): Promise<void> {
  const { runs, streams } = opts;
  app.post<{ Body: RunRequest }>(
    '/v1/runs',
    {
      bodyLimit: SMALL_BODY_LIMIT_BYTES,
      schema: {
        summary: 'Run a task with Claude on a new or existing sandbox',
        tags: ['runs'],
        body: runBody,
        response: { 201: { type: 'object', additionalProperties: true }, ...errors },
      },
    },
    async (request, reply) => {
      const run = await runs.create(
        request.body,
        request.tenant,
        (sessionId, step) => `/v1/sessions/${sessionId}/trajectory/steps/${step}/screenshot`,
        request.placedSessionId ?? undefined,
      );
      return reply.status(201).send(run);
    },
  );

  app.get<{ Params: { id: string } }>(
    '/v1/runs/:id',
    {
      schema: {
        summary: 'A run: state, steps, token usage, stop reason',
        tags: ['runs'],
        params: runIdParams,
        response: { 200: { type: 'object', additionalProperties: true }, ...errors },
      },
    },
    async (request) => runs.get(request.params.id, request.tenant),
  );

  app.delete<{ Params: { id: string } }>(
    '/v1/runs/:id',
    {
      schema: {
        summary: 'Stop a run (idempotent); answers once it has stopped',
        tags: ['runs'],
        params: runIdParams,
        response: { 200: { type: 'object', additionalProperties: true }, ...errors },
      },
    },
    async (request) => runs.cancel(request.params.id, request.tenant),
  );

  app.get<{ Params: { id: string } }>(
    '/v1/runs/:id/events',
    {
      schema: {
        summary: "A run's progress as Server-Sent Events, from its start; the stream ends after the `end` event",
        description: "An open stream counts against the tenant's event streams (SBX_TENANT_MAX_STREAMS; 429 tenant_stream_limit), not its requests in flight.",
        tags: ['runs'],
        params: runIdParams,
      },
    },
    async (request, reply) => {
      const pending: RunEvent[] = [];
      let stream: EventStream<RunEvent> | undefined;
      // A stream slot of the tenant's (429 over SBX_TENANT_MAX_STREAMS) instead of a request slot.
      const release = streams.open(request, reply);
      let subscription: ReturnType<RunManager['subscribe']>;
      try {
        // Throws (404) before anything is written for a run that is not the tenant's.
        subscription = runs.subscribe(request.params.id, request.tenant, (event) => (stream ? stream.send(event) : pending.push(event)));
      } catch (err) {
        release();
        throw err;
      }
      reply.hijack();
      const raw = reply.raw;
      raw.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-store', connection: 'keep-alive' });
      // The client learns at once that its stream is open, before the run's first event.
      raw.flushHeaders();
      const { unsubscribe } = subscription;
      const opened = new EventStream<RunEvent>(
        raw,
        SSE_UNREAD_LIMIT_BYTES,
        () => {
          unsubscribe();
          release();
        },
        (event) => event.type === 'end',
      );
      raw.on('close', () => opened.close());
      for (const event of [...subscription.past, ...pending]) opened.send(event);
      stream = opened;
    },
  );
}
