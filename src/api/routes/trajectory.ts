import { Readable } from 'node:stream';
import type { FastifyInstance, FastifyRequest } from 'fastify';
import { NotFoundError } from '../../errors.js';
import type { SessionDirectory } from '../../sessions/ports.js';
import type { TrajectoryRecorder } from '../../sessions/trajectory/recorder.js';
import { STEP_TOOLS, type TrajectoryRow } from '../../sessions/trajectory/trajectory-store.js';
import { sessionIdParams } from '../schemas.js';
import { allSteps, stepJson, trajectorySummary, videoTimeOf, type TrajectorySummary, type VideoStart } from '../trajectory-view/trajectory-json.js';
import { viewerPage } from '../trajectory-view/viewer-page.js';

export interface TrajectoryRouteOptions {
  manager: Pick<SessionDirectory, 'get'>;
  trajectory: TrajectoryRecorder;
  /** When the session's recording started, if it has one (for the page's links into the video). */
  recordingStart?: (sessionId: string, tenant: string) => Promise<VideoStart | undefined>;
  /** A frame of the session's recording `offsetMs` into it, as JPEG (the tenant's recording only). */
  recordingFrame?: (sessionId: string, tenant: string, offsetMs: number) => Promise<{ data: Buffer; finished: boolean } | undefined>;
}

interface IdParams {
  id: string;
}

const errors = { 400: { $ref: 'Error#' }, 401: { $ref: 'Error#' }, 404: { $ref: 'Error#' } };
/** Steps in one JSON answer at most (JSONL streams them all). */
const JSON_PAGE_STEPS = 1000;
/** How many steps the page embeds; a longer trajectory is read whole through the JSON route. */
const PAGE_STEPS = 2000;
const tokenQuery = {
  token: { type: 'string', maxLength: 128, description: 'A link token (POST /v1/sessions/:id/links), for a browser that cannot send the API key' },
} as const;

const stepParams = {
  ...sessionIdParams,
  required: ['id', 'n'],
  properties: { ...sessionIdParams.properties, n: { type: 'string', pattern: '^[1-9][0-9]{0,8}$', description: 'The step number' } },
} as const;

const stepSchema = {
  type: 'object',
  properties: {
    n: { type: 'integer', description: '1, 2, ... in the order the calls finished' },
    tool: { type: 'string', enum: [...STEP_TOOLS] },
    action: { type: 'string', nullable: true },
    input: { type: 'object', additionalProperties: true, description: 'As the model sent it; typed text as textLength unless the session opted in' },
    output: { type: 'string', nullable: true },
    cursor: { type: 'object', nullable: true, properties: { x: { type: 'integer' }, y: { type: 'integer' } } },
    error: { type: 'object', nullable: true, properties: { code: { type: 'string' }, message: { type: 'string' } } },
    startedMs: { type: 'number', description: 'Milliseconds since the session was created' },
    durationMs: { type: 'number' },
    settleMs: { type: 'number', nullable: true },
    screenshots: {
      type: 'object',
      properties: {
        before: { type: 'string', nullable: true },
        after: { type: 'string', nullable: true },
        frame: {
          type: 'string',
          nullable: true,
          description: "The session's recording at the end of the step (JPEG), for a step without a screenshot of its own",
        },
      },
    },
  },
} as const;

/**
 * A session's trajectory, also after it ended: GET .../trajectory as JSON or streamed JSONL,
 * a step's screenshot, and the viewer page. Each is the session's tenant's only (the tenant
 * hook checks live and stored sessions; the trajectory row's tenant is checked here, for
 * trajectories kept longer than their session's record). The routes also open with a link
 * token of purpose "trajectory" (config.linkPurpose, read by the auth hook).
 */
export async function trajectoryRoutes(app: FastifyInstance, opts: TrajectoryRouteOptions): Promise<void> {
  const { trajectory } = opts;

  const trajectoryOf = (request: FastifyRequest<{ Params: IdParams }>): TrajectoryRow => {
    const row = trajectory.get(request.params.id);
    if (!row || row.tenant !== request.tenant) throw new NotFoundError(`session ${request.params.id} has no trajectory`);
    return row;
  };
  const summaryOf = async (row: TrajectoryRow): Promise<TrajectorySummary> => {
    let session: { state: string; endReason: string | null } | undefined;
    try {
      const view = opts.manager.get(row.sessionId);
      session = { state: view.state, endReason: view.endReason ?? null };
    } catch {
      session = undefined; // its record was pruned: the trajectory outlives it
    }
    return trajectorySummary(row, trajectory.reader, session, await opts.recordingStart?.(row.sessionId, row.tenant));
  };

  app.get<{ Params: IdParams; Querystring: { format?: 'json' | 'jsonl'; from?: string; limit?: string; token?: string } }>(
    '/v1/sessions/:id/trajectory',
    {
      config: { linkPurpose: 'trajectory' },
      schema: {
        summary: "A session's trajectory: every action and tool call, in order, with timings, results and screenshots by URL",
        description:
          'JSON by default; JSONL (one summary line, then one line per step, streamed) with ?format=jsonl or Accept: application/x-ndjson. ' +
          `JSON answers at most ${JSON_PAGE_STEPS} steps from ?from= (default 1), and \`next\`, the URL of the next page, while there are more. ` +
          'Kept after the session ends, for SBX_TRAJECTORY_RETENTION_SECONDS within the size caps.',
        tags: ['trajectory'],
        params: sessionIdParams,
        querystring: {
          type: 'object',
          properties: {
            format: { type: 'string', enum: ['json', 'jsonl'] },
            from: { type: 'string', pattern: '^[1-9][0-9]{0,8}$', description: 'JSON: the first step of the page (default 1)' },
            limit: { type: 'string', pattern: '^[1-9][0-9]{0,8}$', description: `JSON: steps in the page, at most (and by default) ${JSON_PAGE_STEPS}` },
            ...tokenQuery,
          },
        },
        produces: ['application/json', 'application/x-ndjson'],
        response: {
          200: {
            type: 'object',
            properties: {
              sessionId: { type: 'string' },
              state: { type: 'string' },
              endReason: { type: 'string', nullable: true },
              startedAt: { type: 'string', format: 'date-time' },
              keepTypedText: { type: 'boolean' },
              totals: { type: 'object', additionalProperties: { type: 'number' } },
              videoUrl: { type: 'string', nullable: true, description: "The session's recording (GET .../recording), null without one" },
              videoStartMs: {
                type: 'number',
                nullable: true,
                description: 'When the recording started, in ms since the session was created: a step is at startedMs - videoStartMs in the video',
              },
              videoEndMs: { type: 'number', nullable: true, description: 'When the recording ended, the same way (null while recording)' },
              steps: { type: 'array', items: stepSchema },
              next: { type: 'string', nullable: true, description: 'JSON: the URL of the next page of steps, null on the last' },
            },
          },
          ...errors,
        },
      },
    },
    async (request, reply) => {
      const row = trajectoryOf(request);
      const summary = await summaryOf(row);
      const jsonl = request.query.format === 'jsonl' || (request.query.format === undefined && (request.headers.accept ?? '').includes('application/x-ndjson'));
      if (!jsonl) {
        // A page at a time: a trajectory may hold tens of MiB, and an answer is built whole in memory.
        const from = Number(request.query.from ?? 1);
        const limit = Math.min(Number(request.query.limit ?? JSON_PAGE_STEPS), JSON_PAGE_STEPS);
        const page = trajectory.steps(row.sessionId, from, limit + 1);
        const more = page.length > limit ? page.pop() : undefined;
        const next = more ? `/v1/sessions/${row.sessionId}/trajectory?from=${more.n}&limit=${limit}` : null;
        return { ...summary, steps: page.map((step) => stepJson(row.sessionId, step, summary)), next };
      }
      async function* lines(): AsyncGenerator<string> {
        yield `${JSON.stringify({ type: 'trajectory', ...summary })}\n`;
        for await (const step of allSteps(trajectory, row.sessionId)) yield `${JSON.stringify({ type: 'step', ...stepJson(row.sessionId, step, summary) })}\n`;
      }
      return reply.type('application/x-ndjson').header('cache-control', 'no-store').send(Readable.from(lines()));
    },
  );

  app.get<{ Params: IdParams & { n: string }; Querystring: { when?: 'before' | 'after'; token?: string } }>(
    '/v1/sessions/:id/trajectory/steps/:n/screenshot',
    {
      config: { linkPurpose: 'trajectory' },
      schema: {
        summary: 'The screenshot of a step: the screen after it (the settled screen it returned), or before it',
        tags: ['trajectory'],
        params: stepParams,
        querystring: { type: 'object', properties: { when: { type: 'string', enum: ['before', 'after'], default: 'after' }, ...tokenQuery } },
        produces: ['image/png', 'image/jpeg', 'image/webp'],
        response: { 200: { description: 'The image', type: 'string', format: 'binary' }, ...errors },
      },
    },
    async (request, reply) => {
      const row = trajectoryOf(request);
      const n = Number(request.params.n);
      const step = trajectory.reader.step(row.sessionId, n);
      if (!step) throw new NotFoundError(`the trajectory of session ${row.sessionId} has no step ${n}`);
      const source = request.query.when === 'before' ? step.beforeStep : n;
      const image = source !== null ? await trajectory.image(row.sessionId, source) : undefined;
      if (!image) throw new NotFoundError(`step ${n} has no screenshot ${request.query.when ?? 'after'} it (stored only when the call returned one)`);
      // Stored frames never change: a browser may keep them while the page is open.
      return reply.type(image.mediaType).header('cache-control', 'private, max-age=3600').send(image.data);
    },
  );

  app.get<{ Params: IdParams & { n: string }; Querystring: { token?: string } }>(
    '/v1/sessions/:id/trajectory/steps/:n/frame',
    {
      config: { linkPurpose: 'trajectory' },
      schema: {
        summary: "The session's recording at the end of a step, as JPEG: the screen of a step that stored no screenshot of its own",
        description: "Extracted from the video (GET .../recording) at the step's time; 404 when the session has no recording covering that moment.",
        tags: ['trajectory'],
        params: stepParams,
        querystring: { type: 'object', properties: tokenQuery },
        produces: ['image/jpeg'],
        response: { 200: { description: 'The frame', type: 'string', format: 'binary' }, 503: { $ref: 'Error#' }, ...errors },
      },
    },
    async (request, reply) => {
      const row = trajectoryOf(request);
      const n = Number(request.params.n);
      const step = trajectory.reader.step(row.sessionId, n);
      if (!step) throw new NotFoundError(`the trajectory of session ${row.sessionId} has no step ${n}`);
      const summary = await summaryOf(row);
      const at = videoTimeOf(step, summary);
      const frame = at !== undefined ? await opts.recordingFrame?.(row.sessionId, row.tenant, at) : undefined;
      if (!frame) throw new NotFoundError(`session ${row.sessionId} has no recording of the moment of step ${n}`);
      // A finished recording never changes: its frames may be kept while the page is open.
      return reply
        .type('image/jpeg')
        .header('cache-control', frame.finished ? 'private, max-age=3600' : 'no-store')
        .send(frame.data);
    },
  );

  app.get<{ Params: IdParams; Querystring: { token?: string } }>(
    '/v1/sessions/:id/trajectory/view',
    {
      config: { linkPurpose: 'trajectory' },
      schema: {
        summary: 'A page for people that steps through the trajectory (open it with a link token from POST .../links)',
        tags: ['trajectory'],
        params: sessionIdParams,
        querystring: { type: 'object', properties: tokenQuery },
        produces: ['text/html'],
        response: { 200: { description: 'The page', type: 'string' }, ...errors },
      },
    },
    async (request, reply) => {
      const row = trajectoryOf(request);
      const summary = await summaryOf(row);
      const steps = trajectory.steps(row.sessionId, 1, PAGE_STEPS).map((step) => stepJson(row.sessionId, step, summary));
      const page = viewerPage({ ...summary, steps });
      return (
        reply
          .type('text/html; charset=utf-8')
          .header('cache-control', 'no-store')
          // The token is in this page's URL: it must not leave in a Referer, and nothing but our own inline code and images run.
          .header('referrer-policy', 'no-referrer')
          .header('x-content-type-options', 'nosniff')
          .header(
            'content-security-policy',
            `default-src 'none'; img-src 'self'; style-src 'nonce-${page.nonce}'; script-src 'nonce-${page.nonce}'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'`,
          )
          .send(page.html)
      );
    },
  );
}
