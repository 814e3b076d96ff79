import { createReadStream } from 'node:fs';
import { open, stat, type FileHandle } from 'node:fs/promises';
import { NotFoundError } from '../../errors.js';
import { sendError } from '../errors.js';
import type { FastifyInstance } from 'fastify';
import type { SessionRecordings } from '../../sessions/ports.js';
import { parseByteRange } from '../byte-range.js';
import { recordingStatusSchema } from '../recording-schemas.js';
import { sessionIdParams } from '../schemas.js';

interface IdParams {
  id: string;
}

const errors = { 404: { $ref: 'Error#' }, 409: { $ref: 'Error#' }, 410: { $ref: 'Error#' } };

/**
 * A session's screen recording: start, stop, its status, and the video (MP4, with Range for
 * browsers' <video>) and its subtitles (WebVTT: the agent's actions), also after the session
 * ended, until retention deletes them. The files are the orchestrator's, on the host only.
 * Besides the tenant hook (which knows sessions by their rows and their kept artifacts), each
 * route asks for the recording as the request's tenant: the recording's own record decides.
 */
export async function recordingRoutes(app: FastifyInstance, opts: { manager: SessionRecordings }): Promise<void> {
  const { manager } = opts;
  const statusReply = { 200: recordingStatusSchema, ...errors };

  app.post<{ Params: IdParams }>(
    '/v1/sessions/:id/recording/start',
    {
      schema: {
        summary: 'Start recording the screen to a video (nothing changes if it is being recorded)',
        description: 'A recording stopped earlier is replaced by the new one.',
        tags: ['recording'],
        params: sessionIdParams,
        response: statusReply,
      },
    },
    async (request) => manager.startRecording(request.params.id),
  );

  app.post<{ Params: IdParams }>(
    '/v1/sessions/:id/recording/stop',
    {
      schema: {
        summary: 'Stop recording; the video is complete when this answers',
        tags: ['recording'],
        params: sessionIdParams,
        response: statusReply,
      },
    },
    async (request) => manager.stopRecording(request.params.id, request.tenant),
  );

  app.get<{ Params: IdParams }>(
    '/v1/sessions/:id/recording/status',
    { schema: { summary: "The recording's state, size and frames", tags: ['recording'], params: sessionIdParams, response: statusReply } },
    async (request) => manager.recordingStatus(request.params.id, request.tenant),
  );

  app.get<{ Params: IdParams }>(
    '/v1/sessions/:id/recording',
    {
      // The trajectory page links each step into the video: its link token opens this too.
      config: { linkPurpose: 'trajectory' },
      schema: {
        summary: 'Download the video (MP4, H.264), also after the session ended; Range requests are answered',
        description: 'While recording, the file so far (fragmented MP4: playable). x-recording-state says recording, finished or failed.',
        tags: ['recording'],
        params: sessionIdParams,
        produces: ['video/mp4'],
        response: {
          200: { description: 'The video', type: 'string', format: 'binary' },
          206: { description: 'A byte range of it', type: 'string', format: 'binary' },
          416: { $ref: 'Error#' },
          ...errors,
        },
      },
    },
    async (request, reply) => {
      const { video, status } = await manager.recordingFiles(request.params.id, request.tenant);
      // One open file, measured and read through the same descriptor, no further than its size
      // then: the file grows while recording, and a new recording replaces it (recordings.ts),
      // so a path looked at twice could give a body other than its content-length.
      const file = await openRecording(video, request.params.id);
      let size: number;
      try {
        size = (await file.stat()).size;
      } catch (err) {
        await file.close();
        throw err;
      }
      const range = parseByteRange(request.headers.range, size);
      void reply.header('accept-ranges', 'bytes').header('cache-control', 'no-store').header('x-recording-state', status.state);
      if (range === 'unsatisfiable' || size === 0) await file.close();
      if (range === 'unsatisfiable') {
        void reply.header('content-range', `bytes */${size}`);
        return sendError(reply, 'range_not_satisfiable', `range is outside the file's ${size} bytes`);
      }
      void reply.type('video/mp4');
      if (size === 0) return reply.header('content-length', 0).send(Buffer.alloc(0));
      if (range === 'whole') return reply.header('content-length', size).send(file.createReadStream({ start: 0, end: size - 1 }));
      return reply
        .status(206)
        .header('content-range', `bytes ${range.start}-${range.end}/${size}`)
        .header('content-length', range.end - range.start + 1)
        .send(file.createReadStream({ start: range.start, end: range.end }));
    },
  );

  app.get<{ Params: IdParams }>(
    '/v1/sessions/:id/recording/subtitles',
    {
      schema: {
        summary: "The agent's actions as WebVTT subtitles of the video (clicks with position, typed text as its length, key names)",
        tags: ['recording'],
        params: sessionIdParams,
        produces: ['text/vtt'],
        response: { 200: { description: 'WebVTT', type: 'string' }, ...errors },
      },
    },
    async (request, reply) => {
      const { subtitles } = await manager.recordingFiles(request.params.id, request.tenant);
      await fileSize(subtitles, request.params.id);
      return reply.type('text/vtt; charset=utf-8').header('cache-control', 'no-store').send(createReadStream(subtitles));
    },
  );
}

/** The video, open for reading; missing, the same 404 as fileSize's. */
async function openRecording(file: string, sessionId: string): Promise<FileHandle> {
  try {
    return await open(file, 'r');
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') throw noFileYet(sessionId);
    throw err;
  }
}

function noFileYet(sessionId: string): NotFoundError {
  return new NotFoundError(`the recording of session ${sessionId} has no file yet (it is written within a second of the start): try again shortly`);
}

/**
 * A recording's file, which ffmpeg (or the subtitle writer) creates within about a second of
 * the start: asked for before that, or after a failure left none, it is a 404 saying so.
 */
async function fileSize(file: string, sessionId: string): Promise<{ size: number }> {
  try {
    return await stat(file);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') {
      throw noFileYet(sessionId);
    }
    throw err;
  }
}
