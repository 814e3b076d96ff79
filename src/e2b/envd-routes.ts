import path from 'node:path';
import { Readable } from 'node:stream';
import multipart from '@fastify/multipart';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { InvalidRequestError, OrchestratorError } from '../errors.js';
import { FsCalls } from '../files/fs-calls.js';
import { SandboxFiles } from '../files/sandbox-files.js';
import { DEFAULT_PROCESS_LIMITS, type ProcessLimits } from '../processes/limits.js';
import { sessionProcesses } from '../processes/session-processes.js';
import type { FileSessions, SessionPausing, ToolSessions } from '../sessions/ports.js';
import type { StreamSlots } from '../api/stream-slots.js';
import { connectRefusal, CONNECT_TYPES, envdHandlers, isStreamingPath, serveConnect, type EnvdCall } from './envd-connect.js';
import { e2bFailure } from './errors.js';
import { checkUser, ENVD_PREFIX, envdPath } from './envd-access.js';
import { filesystemService, type WatcherTable } from './envd-filesystem.js';
import { processService } from './envd-process.js';
import { fastPathFor, serveProcessStream } from './envd-stream.js';
import { Filesystem } from './gen/filesystem/filesystem_pb.js';
import { Process } from './gen/process/process_pb.js';
import type { E2bSandboxStore } from './sandbox-store.js';

export interface EnvdRoutesOptions {
  manager: Pick<ToolSessions, 'attachment' | 'connection' | 'displayOf'> & Pick<FileSessions, 'transferActivity'> & Pick<SessionPausing, 'ensureRunning'>;
  store: E2bSandboxStore;
  /** SBX_MAX_FILE_BYTES: the largest file /files moves. */
  maxFileBytes: number;
  /** The tenant's event streams: a Start, Connect or WatchDir stream takes one, like our own streams. */
  streams: StreamSlots;
  limits?: ProcessLimits;
}

/** Files one multipart upload may carry (the SDK's files.write of several files sends one part each). */
export const MAX_UPLOAD_FILES = 64;

interface EnvdRequest {
  Params: { id: string; service: string; method: string };
}

/**
 * E2B's in-sandbox API (envd) served here and carried to the guest over the session's SSH
 * connection: no agent in the guest, no port on its network. The Process and Filesystem
 * services are Connect RPC (envd-connect.ts); /files and /health are plain HTTP. Every request
 * was opened by its sandbox's envd access token in the auth hook (envd-access.ts), before its
 * body was read.
 */
export async function envdRoutes(app: FastifyInstance, opts: EnvdRoutesOptions): Promise<void> {
  const { manager, store } = opts;
  const limits = opts.limits ?? DEFAULT_PROCESS_LIMITS;
  const handlers = envdHandlers((router) => router.service(Process, processService).service(Filesystem, filesystemService));
  // E2B's API, not ours: left out of our OpenAPI description (and so of the client's types).
  app.addHook('onRoute', (route) => {
    route.schema = { ...route.schema, hide: true };
  });
  app.removeAllContentTypeParsers();
  // Connect reads its calls' bodies itself, each message held to MAX_CONNECT_MESSAGE_BYTES.
  app.addContentTypeParser(CONNECT_TYPES, (_req, payload, done) => done(null, payload));
  // Streamed to the guest as it comes, held to SBX_MAX_FILE_BYTES by SandboxFiles.upload.
  app.addContentTypeParser('application/octet-stream', (_req, payload, done) => done(null, payload));
  // multipart/form-data, its parts streamed one at a time (a file part straight to the guest);
  // a file's own cap is SandboxFiles.upload's (one byte more here, so that it is the one that speaks).
  await app.register(multipart, {
    limits: { fileSize: opts.maxFileBytes + 1, files: MAX_UPLOAD_FILES, fields: 16, fieldSize: 64 * 1024, parts: MAX_UPLOAD_FILES + 16, headerPairs: 32 },
  });

  app.setErrorHandler(async (error, request, reply) => {
    const failure = e2bFailure(error);
    if (failure.status >= 500) request.log.warn({ err: error }, 'envd request failed');
    if (reply.sent || reply.raw.headersSent) return;
    const params = request.params as Partial<EnvdRequest['Params']> | undefined;
    if (typeof params?.service === 'string' && typeof params.method === 'string') {
      const streaming = isStreamingPath(handlers, `/${params.service}/${params.method}`);
      return connectRefusal(reply, streaming, request.headers['content-type'], error);
    }
    return reply.status(failure.status).send({ code: failure.status, message: failure.message });
  });
  // A call to a paused sandbox resumes it first, as our own routes do (auto-resume.ts).
  app.addHook('preHandler', async (request) => {
    const id = (request.params as { id?: unknown }).id;
    if (typeof id === 'string') await manager.ensureRunning(id);
  });

  const config = { e2b: 'envd' as const };
  const params = {
    type: 'object',
    required: ['id', 'service', 'method'],
    properties: {
      id: { type: 'string', maxLength: 64 },
      service: { type: 'string', enum: ['process.Process', 'filesystem.Filesystem'] },
      method: { type: 'string', pattern: '^[A-Za-z]{1,64}$' },
    },
  } as const;
  const watchersOf = (id: string) =>
    manager.attachment<WatcherTable>(id, 'e2b-watchers', async ({ cleanup }) => {
      const table: WatcherTable = { watchers: new Map() };
      await cleanup.push('e2b-watchers', () => {
        for (const kept of table.watchers.values()) kept.watch.stop();
        table.watchers.clear();
      });
      return table;
    });
  const callOf = (request: FastifyRequest<EnvdRequest>, reply: FastifyReply): EnvdCall => {
    const id = request.params.id;
    return {
      request,
      reply,
      sandboxId: id,
      // A stream takes one of the tenant's stream slots (429 beyond) and gives back its request slot.
      openStream: () => void opts.streams.open(request, reply),
      processes: async () => ({ table: await sessionProcesses(manager, id, manager.displayOf(id), limits), envVars: store.get(id)?.envVars ?? {} }),
      fs: async () => {
        const connection = manager.connection(id);
        return new FsCalls(await connection.sftp(), connection);
      },
      watchers: () => watchersOf(id),
    };
  };

  app.post<EnvdRequest>(`${ENVD_PREFIX}/:id/:service/:method`, { config, schema: { params } }, async (request, reply) => {
    const path = `/${request.params.service}/${request.params.method}`;
    // A command's stream, the hot path: straight onto the response (envd-stream.ts); the rest through connect.
    const fast = fastPathFor(path, request.raw);
    if (fast) return serveProcessStream(callOf(request, reply), fast);
    return serveConnect(handlers, path, callOf(request, reply));
  });

  const idOnly = { type: 'object', required: ['id'], properties: { id: { type: 'string', maxLength: 64 } } } as const;
  const filesQuery = {
    type: 'object',
    properties: {
      path: { type: 'string', maxLength: 4096 },
      username: { type: 'string', maxLength: 64 },
      signature: { type: 'string' },
      signature_expiration: { type: 'integer' },
    },
  } as const;
  type FilesRequest = { Params: { id: string }; Querystring: { path?: string; username?: string } };

  app.get<FilesRequest>(`${ENVD_PREFIX}/:id/files`, { config, schema: { params: idOnly, querystring: filesQuery } }, async (request, reply) => {
    checkUser(request, request.query.username);
    const file = envdPath(request.query.path);
    const files = await SandboxFiles.on(manager.connection(request.params.id));
    const download = await files.download(file, opts.maxFileBytes, manager.transferActivity(request.params.id));
    return reply
      .header('content-type', 'application/octet-stream')
      .header('content-length', String(download.size))
      .header('content-disposition', `attachment; filename*=UTF-8''${encodeURIComponent(path.posix.basename(file))}`)
      .send(download.stream);
  });

  app.post<FilesRequest>(`${ENVD_PREFIX}/:id/files`, { config, schema: { params: idOnly, querystring: filesQuery } }, async (request) => {
    checkUser(request, request.query.username);
    const connection = manager.connection(request.params.id);
    const files = await SandboxFiles.on(connection);
    const fs = new FsCalls(await connection.sftp(), connection);
    const activity = manager.transferActivity(request.params.id);
    const written: Array<{ name: string; type: 'file'; path: string }> = [];
    const put = async (target: string | undefined, source: Readable) => {
      const file = envdPath(target, 'path');
      // envd makes the parent directories of a file it writes.
      await fs.mkdir(path.posix.dirname(file)).catch((err: unknown) => {
        throw err instanceof OrchestratorError ? err : new OrchestratorError('file_transfer_failed', (err as Error).message);
      });
      const result = await files.upload(file, source, { maxBytes: opts.maxFileBytes, onProgress: activity });
      written.push({ name: path.posix.basename(result.path), type: 'file', path: result.path });
    };
    if (request.isMultipart()) {
      // One part at a time, each file streamed to the guest as it arrives: nothing is held whole.
      for await (const part of request.parts()) {
        if (part.type !== 'file') continue;
        if (part.fieldname !== 'file') part.file.resume();
        else await put(request.query.path ?? part.filename, part.file);
      }
    } else if (request.body instanceof Readable) {
      await put(request.query.path, request.body);
    }
    if (written.length === 0)
      throw new InvalidRequestError('the body carries no file: send multipart/form-data with "file" parts, or application/octet-stream with ?path=');
    return written;
  });

  app.get<{ Params: { id: string } }>(`${ENVD_PREFIX}/:id/health`, { config, schema: { params: idOnly } }, async (_request, reply) => reply.status(204).send());
}
