import path from 'node:path';
import { Readable } from 'node:stream';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { InvalidRequestError, OrchestratorError } from '../errors.js';
import { FsCalls } from '../files/fs-calls.js';
import { SandboxFiles } from '../files/sandbox-files.js';
import { DEFAULT_PROCESS_LIMITS, type ProcessLimits } from '../processes/limits.js';
import { sessionProcesses } from '../processes/session-processes.js';
import type { FileSessions, SessionPausing, ToolSessions } from '../sessions/ports.js';
import type { StreamSlots } from '../api/stream-slots.js';
import { ConnectStream, MAX_CONNECT_MESSAGE_BYTES, requestMessage, streamError, STREAM_TYPE, UNARY_TYPE } from './connect-protocol.js';
import { CONNECT_HTTP_STATUS, e2bFailure } from './errors.js';
import { checkUser, ENVD_PREFIX, envdPath } from './envd-access.js';
import { filesystemCall, type WatcherTable } from './envd-filesystem.js';
import { processCall } from './envd-process.js';
import { multipartBoundary, parseMultipart } from './multipart.js';
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

/** A multipart upload is buffered to be split: it is held to this much (larger files: the SDK's useOctetStream, streamed). */
export const MAX_MULTIPART_BYTES = 32 * 1024 * 1024;
/** Multipart uploads a tenant may have buffering at once (each up to MAX_MULTIPART_BYTES). */
export const MULTIPART_UPLOADS_PER_TENANT = 2;
const STREAMING = new Set(['Start', 'Connect', 'WatchDir']);

interface EnvdRequest {
  Params: { id: string; method: string };
}

/**
 * E2B's in-sandbox API (envd) served here and carried to the guest over the session's SSH
 * connection: no agent in the guest, no port on its network. The Process and Filesystem
 * services speak Connect with the JSON codec (connect-protocol.ts); /files and /health are
 * plain HTTP. Every request was opened by its sandbox's envd access token in the auth hook
 * (envd-access.ts), before its body was read; a body is capped as it arrives, before parsing.
 */
export async function envdRoutes(app: FastifyInstance, opts: EnvdRoutesOptions): Promise<void> {
  const { manager, store } = opts;
  const limits = opts.limits ?? DEFAULT_PROCESS_LIMITS;
  // E2B's API, not ours: left out of our OpenAPI description (and so of the client's types).
  app.addHook('onRoute', (route) => {
    route.schema = { ...route.schema, hide: true };
  });
  const multipartLimit = Math.min(opts.maxFileBytes, MAX_MULTIPART_BYTES);
  app.removeAllContentTypeParsers();
  app.addContentTypeParser([UNARY_TYPE, STREAM_TYPE], { parseAs: 'buffer', bodyLimit: MAX_CONNECT_MESSAGE_BYTES }, (_req, body, done) => done(null, body));
  app.addContentTypeParser('multipart/form-data', { parseAs: 'buffer', bodyLimit: multipartLimit }, (_req, body, done) => done(null, body));
  // Streamed to the guest as it comes, held to SBX_MAX_FILE_BYTES by SandboxFiles.upload.
  app.addContentTypeParser('application/octet-stream', (_req, payload, done) => done(null, payload));
  // A multipart body is held whole to be split: at most MULTIPART_UPLOADS_PER_TENANT of them
  // at once per tenant (taken before the body is read, given back when the answer is done), so
  // a tenant holds at most that many times the cap in the orchestrator, not one per request.
  const buffering = new Map<string, number>();
  app.addHook('preParsing', async (request, reply, payload) => {
    if (!multipartBoundary(request.headers['content-type'])) return payload;
    const { tenant } = request;
    const held = buffering.get(tenant) ?? 0;
    if (held >= MULTIPART_UPLOADS_PER_TENANT) {
      throw new OrchestratorError(
        'tenant_concurrency_limit',
        `the tenant has ${held} multipart uploads in flight, as many as it may: wait for one to finish, or send the file as application/octet-stream (streamed)`,
      );
    }
    buffering.set(tenant, held + 1);
    reply.raw.once('close', () => {
      const left = (buffering.get(tenant) ?? 1) - 1;
      if (left > 0) buffering.set(tenant, left);
      else buffering.delete(tenant);
    });
    return payload;
  });

  app.setErrorHandler(async (error, request, reply) => {
    let failure = e2bFailure(error);
    if ((error as { code?: unknown }).code === 'FST_ERR_CTP_BODY_TOO_LARGE') {
      const connect = request.url.includes('.Process/') || request.url.includes('.Filesystem/');
      const cap = connect ? MAX_CONNECT_MESSAGE_BYTES : multipartLimit;
      failure = {
        ...failure,
        code: 'connect_message_too_large',
        message: `connect_message_too_large: the request is over its cap of ${cap} bytes; nothing was parsed`,
      };
    }
    if (failure.status >= 500) request.log.warn({ err: error }, 'envd request failed');
    if (reply.sent || reply.raw.headersSent) return;
    const method = (request.params as { method?: unknown } | undefined)?.method;
    if (typeof method === 'string') {
      if (STREAMING.has(method)) return streamError(reply, failure.connectCode, failure.message);
      return reply.status(CONNECT_HTTP_STATUS[failure.connectCode]).send({ code: failure.connectCode, message: failure.message });
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
    required: ['id', 'method'],
    properties: { id: { type: 'string', maxLength: 64 }, method: { type: 'string', pattern: '^[A-Za-z]{1,64}$' } },
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

  /** A call's response as a stream: it takes one of the tenant's stream slots (429 beyond) and gives back its request slot. */
  const streamOf = (request: FastifyRequest, reply: FastifyReply) => () => {
    opts.streams.open(request, reply);
    return new ConnectStream(reply);
  };

  app.post<EnvdRequest>(`${ENVD_PREFIX}/:id/process.Process/:method`, { config, schema: { params } }, async (request, reply) => {
    const message = requestMessage(request);
    const table = await sessionProcesses(manager, request.params.id, manager.displayOf(request.params.id), limits);
    const envVars = store.get(request.params.id)?.envVars ?? {};
    const answer = await processCall(request.params.method, message, { table, envVars, openStream: streamOf(request, reply) }, request);
    return answer === undefined ? reply : answer;
  });

  app.post<EnvdRequest>(`${ENVD_PREFIX}/:id/filesystem.Filesystem/:method`, { config, schema: { params } }, async (request, reply) => {
    const message = requestMessage(request);
    const connection = manager.connection(request.params.id);
    const fs = new FsCalls(await connection.sftp(), connection);
    const answer = await filesystemCall(request.params.method, message, fs, await watchersOf(request.params.id), request, streamOf(request, reply));
    return answer === undefined ? reply : answer;
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
    const uploads: Array<{ file: string; source: Readable }> = [];
    const boundary = multipartBoundary(request.headers['content-type']);
    if (boundary) {
      for (const part of parseMultipart(request.body as Buffer, boundary)) {
        if (part.name !== 'file') continue;
        const target = request.query.path ?? part.filename;
        uploads.push({ file: envdPath(target, 'path'), source: Readable.from([part.data]) });
      }
    } else if (request.body instanceof Readable) {
      uploads.push({ file: envdPath(request.query.path), source: request.body });
    }
    if (uploads.length === 0)
      throw new InvalidRequestError('the body carries no file: send multipart/form-data with "file" parts, or application/octet-stream with ?path=');
    const written: Array<{ name: string; type: 'file'; path: string }> = [];
    for (const upload of uploads) {
      // envd makes the parent directories of a file it writes.
      await fs.mkdir(path.posix.dirname(upload.file)).catch((err: unknown) => {
        throw err instanceof OrchestratorError ? err : new OrchestratorError('file_transfer_failed', (err as Error).message);
      });
      const result = await files.upload(upload.file, upload.source, { maxBytes: opts.maxFileBytes, onProgress: activity });
      written.push({ name: path.posix.basename(result.path), type: 'file', path: result.path });
    }
    return written;
  });

  app.get<{ Params: { id: string } }>(`${ENVD_PREFIX}/:id/health`, { config, schema: { params: idOnly } }, async (_request, reply) => reply.status(204).send());
}
