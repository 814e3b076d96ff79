import { setTimeout as sleep } from 'node:timers/promises';
import type { FastifyInstance } from 'fastify';
import type { RawFrame } from '../../computer/capture-channel.js';
import { encodeFrame } from '../../computer/frame-image.js';
import { resolveScreenshotFormat } from '../../computer/screenshot-format.js';
import type { ScreenFrames } from '../../sessions/ports.js';
import { screenshotFormatQuery, sessionIdParams } from '../schemas.js';
import type { StreamSlots } from '../stream-slots.js';

/** What one client may have waiting unread: about two frames. Beyond it the client is dropped, not buffered for. */
export const STREAM_MAX_BUFFERED_BYTES = 1024 * 1024;
/** A comment this often keeps proxies from closing a quiet stream. */
const HEARTBEAT_MS = 15_000;

interface StreamRequest {
  Params: { id: string };
  Querystring: { format?: string; quality?: string; fps?: string };
}

/**
 * GET /v1/sessions/:id/screen/stream: Server-Sent Events, one `frame` event each time the
 * screen changed, for dashboards that do not speak VNC. The session's capture channel is
 * polled at most `fps` times a second (1-5, default 2): an unchanged screen is the same frame
 * object, so nothing is encoded or sent for it. A client that does not keep up is dropped.
 * When the session ends, an `end` event says why and the stream closes.
 */
export async function screenStreamRoutes(app: FastifyInstance, opts: { manager: ScreenFrames; streams: StreamSlots }): Promise<void> {
  const { manager, streams } = opts;
  app.get<StreamRequest>(
    '/v1/sessions/:id/screen/stream',
    {
      schema: {
        summary: 'Server-Sent Events: a frame (base64 image) whenever the screen changes',
        description:
          "Each `frame` event's data is JSON {seq, at, mediaType, width, height, data (base64)}; jpeg at quality 70 unless ?format/?quality say otherwise. " +
          `?fps (1-5, default 2) bounds how often the screen is looked at. A client with more than ${STREAM_MAX_BUFFERED_BYTES} bytes unread is disconnected. ` +
          'An `end` event {reason} comes when the session is no longer ready. ' +
          `A tenant has at most ${streams.maxPerTenant} event streams open (SBX_TENANT_MAX_STREAMS; 429 tenant_stream_limit); they do not count as requests in flight.`,
        tags: ['computer'],
        params: sessionIdParams,
        querystring: {
          type: 'object',
          properties: { ...screenshotFormatQuery, fps: { type: 'string', pattern: '^[1-5]$', description: 'Looks per second, 1-5 (default 2)' } },
        },
        produces: ['text/event-stream'],
        response: {
          200: { description: 'text/event-stream', type: 'string' },
          400: { $ref: 'Error#' },
          404: { $ref: 'Error#' },
          409: { $ref: 'Error#' },
          410: { $ref: 'Error#' },
          429: { $ref: 'Error#' },
        },
      },
    },
    async (request, reply) => {
      const { id } = request.params;
      const { format, quality, fps } = request.query;
      const choice = resolveScreenshotFormat({ format, quality }, { format: 'jpeg', quality: 70 });
      const intervalMs = 1000 / Number(fps ?? 2);
      // The stream's slot before the first await (the request's own slot is given back).
      const release = streams.open(request, reply);
      // The first frame before the answer starts: a session that is not ready gets its 404/409/410.
      let frame: RawFrame | undefined;
      try {
        frame = await manager.screenFrame(id, 0);
      } catch (err) {
        release();
        throw err;
      }
      reply.hijack();
      const res = reply.raw;
      res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-store', connection: 'keep-alive', 'x-accel-buffering': 'no' });
      let open = true;
      request.raw.on('close', () => (open = false));
      res.on('close', () => (open = false));
      const send = (text: string): boolean => {
        if (!open) return false;
        if (res.writableLength + text.length > STREAM_MAX_BUFFERED_BYTES) {
          request.log.warn({ sessionId: id, buffered: res.writableLength }, 'screen stream client is not reading; dropping it');
          open = false;
          res.destroy();
          return false;
        }
        res.write(text);
        return true;
      };
      let last: RawFrame | undefined;
      let seq = 0;
      let heartbeatAt = Date.now();
      try {
        while (open) {
          if (frame && frame !== last) {
            last = frame;
            const image = await encodeFrame(frame, choice);
            const data = JSON.stringify({
              seq: ++seq,
              at: new Date().toISOString(),
              mediaType: image.mediaType,
              width: frame.width,
              height: frame.height,
              data: image.data.toString('base64'),
            });
            if (!send(`id: ${seq}\nevent: frame\ndata: ${data}\n\n`)) break;
            heartbeatAt = Date.now();
          } else if (Date.now() - heartbeatAt > HEARTBEAT_MS) {
            if (!send(': still here\n\n')) break;
            heartbeatAt = Date.now();
          }
          await sleep(intervalMs);
          if (!open) break;
          frame = await manager.screenFrame(id, intervalMs / 2);
        }
      } catch (err) {
        send(`event: end\ndata: ${JSON.stringify({ reason: (err as Error).message })}\n\n`);
      } finally {
        release();
        if (!res.destroyed) res.end();
      }
    },
  );
}
