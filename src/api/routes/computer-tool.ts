import type { FastifyInstance } from 'fastify';
import { DesktopError } from '../../computer/desktop.js';
import { HumanInControlError, InvalidRequestError } from '../../errors.js';
import type { ComputerActions } from '../../sessions/ports.js';
import type { TrajectoryRecorder } from '../../sessions/trajectory/recorder.js';
import { recordedCall } from '../../sessions/trajectory/recorded-call.js';
import { errorResult, imageContent, type ToolResult } from '../../tools/tool-result.js';
import { actionBody, sessionIdParams } from '../schemas.js';

const errors = { 404: { $ref: 'Error#' }, 409: { $ref: 'Error#' }, 410: { $ref: 'Error#' } };

/**
 * POST /v1/sessions/:id/tools/computer: the computer tool as an agent loop uses it. The body
 * is the model's tool_use input as sent; the answer is the tool_result content, with
 * is_error for mistakes the model can correct (HTTP 200, so the loop just forwards it).
 */
export async function computerToolRoutes(app: FastifyInstance, opts: { manager: ComputerActions; trajectory?: TrajectoryRecorder }): Promise<void> {
  app.post<{ Params: { id: string }; Body: unknown; Querystring: { format?: string; quality?: string } }>(
    '/v1/sessions/:id/tools/computer',
    {
      schema: {
        summary: 'The computer tool: a tool_use input in, its tool_result content out',
        description:
          'Actions other than screenshot, cursor_position and zoom return the screen once it has settled; ' +
          'the headers x-settle-ms and x-duration-ms say how long that took. ?format and ?quality choose the image format ' +
          "(png, jpeg or webp; the session's default otherwise): the image block's media_type says which. A bad one is a tool error.",
        tags: ['tools'],
        params: sessionIdParams,
        // Checked by the handler, not here: a bad value is a tool error, like a bad tool input.
        querystring: {
          type: 'object',
          properties: {
            format: { type: 'string', description: 'png, jpeg or webp' },
            quality: { type: 'string', description: 'jpeg and webp: 1-100 (100 is lossless for webp)' },
          },
        },
        body: { ...actionBody, required: [] },
        response: { 200: { $ref: 'ToolResult#' }, ...errors },
      },
    },
    async (request, reply) => {
      let result: ToolResult;
      try {
        const { format, quality } = request.query;
        const { id } = request.params;
        const outcome = await recordedCall(
          opts.trajectory,
          { sessionId: id, tool: 'computer', input: request.body },
          () => opts.manager.act(id, request.body, { screenshotAfter: true, format: { format, quality } }),
          (o) => ({ durationMs: o.durationMs, settleMs: o.settleMs, output: o.output, cursor: o.cursor, image: o.image }),
        );
        result = { content: [], is_error: false };
        if (outcome.output !== undefined) result.content.push({ type: 'text', text: outcome.output });
        if (outcome.image) result.content.push(imageContent(outcome.image));
        if (outcome.settleMs !== undefined) void reply.header('x-settle-ms', String(outcome.settleMs));
        void reply.header('x-duration-ms', outcome.durationMs.toFixed(1));
      } catch (err) {
        if (!(err instanceof InvalidRequestError || err instanceof DesktopError || err instanceof HumanInControlError)) throw err;
        result = errorResult(err.message);
      }
      return reply.send(result);
    },
  );
}
