import path from 'node:path';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import type { FileSessions } from '../../sessions/ports.js';
import { attachmentDisposition } from '../../files/content-disposition.js';
import { FileTooLargeError } from '../../files/errors.js';
import { SandboxFiles } from '../../files/sandbox-files.js';
import { MAX_PATH_LENGTH, sandboxPath } from '../../files/sandbox-path.js';
import { sessionIdParams } from '../schemas.js';

export interface FileRoutesOptions {
  manager: FileSessions;
  /** Largest file in either direction (the orchestrator's config: SBX_MAX_FILE_BYTES). */
  maxFileBytes: number;
}

interface FileRequest {
  Params: { id: string };
  Querystring: { path: string; mode?: string; maxBytes?: string };
}

const pathQuery = {
  type: 'string',
  minLength: 1,
  maxLength: MAX_PATH_LENGTH,
  description: 'Absolute path in the sandbox; `.` and `..` are resolved',
} as const;

const errors = {
  400: { $ref: 'Error#' },
  403: { $ref: 'Error#' },
  404: { $ref: 'Error#' },
  409: { $ref: 'Error#' },
  410: { $ref: 'Error#' },
  413: { $ref: 'Error#' },
  502: { $ref: 'Error#' },
};

/**
 * PUT/GET /v1/sessions/:id/files?path=: upload and download over SFTP on the session's
 * SSH connection, as the guest user. Bytes are streamed both ways, never held whole.
 */
export async function fileRoutes(app: FastifyInstance, opts: FileRoutesOptions): Promise<void> {
  const { manager } = opts;
  const maxBytes = opts.maxFileBytes;

  // Upload bodies are streamed, never parsed. In this plugin's scope only (fastify
  // encapsulates parsers), every content type reaches the handler as the raw request: the
  // default JSON and text parsers would buffer it, and a parser with `parseAs` would apply
  // the app-wide 1 MiB bodyLimit. Without `parseAs` fastify does not count the bytes; the
  // upload does, against maxBytes.
  app.removeAllContentTypeParsers();
  const passThrough = (_request: FastifyRequest, payload: NodeJS.ReadableStream, done: (err: Error | null, body?: unknown) => void) => done(null, payload);
  app.addContentTypeParser('application/octet-stream', passThrough);
  app.addContentTypeParser('*', passThrough);

  app.put<FileRequest>(
    '/v1/sessions/:id/files',
    {
      bodyLimit: maxBytes,
      schema: {
        summary: 'Upload a file: the body is its raw bytes (application/octet-stream)',
        description:
          `Streams the body into the file over SFTP, as the guest user. At most ${maxBytes} bytes (413 beyond). ` +
          'The file is replaced atomically once complete; an aborted or oversized upload leaves nothing behind. ' +
          'Missing parent directories are not created (404 file_not_found naming the parent).',
        tags: ['files'],
        consumes: ['application/octet-stream'],
        // Documentation only: an empty schema accepts the raw stream, so nothing is validated.
        body: { description: 'The raw bytes of the file' },
        params: sessionIdParams,
        querystring: {
          type: 'object',
          required: ['path'],
          additionalProperties: false,
          properties: {
            path: pathQuery,
            mode: {
              type: 'string',
              pattern: '^[0-7]{3,4}$',
              description: 'Octal permissions, e.g. 0644 (default: those of the file replaced, else 0644)',
            },
          },
        },
        response: {
          201: {
            type: 'object',
            required: ['path', 'size'],
            properties: {
              path: { type: 'string', description: 'The normalised path written (a symlink is followed)' },
              size: { type: 'integer', description: 'Bytes written' },
            },
          },
          ...errors,
        },
      },
      // An error answered before the whole body arrived: close the connection rather than
      // let Node read (and discard) the rest of a possibly huge body to keep it alive.
      onSend: async (request, reply) => {
        if (reply.statusCode >= 400 && !request.raw.complete) void reply.header('connection', 'close');
      },
    },
    async (request, reply) => {
      const connection = manager.connection(request.params.id);
      const file = sandboxPath(request.query.path);
      const mode = request.query.mode === undefined ? undefined : Number.parseInt(request.query.mode, 8);
      const declared = Number(request.headers['content-length']);
      if (declared > maxBytes) throw new FileTooLargeError(`the upload (${declared} bytes)`, maxBytes);
      const files = await SandboxFiles.on(connection);
      // request.raw, not request.body: with no body (Content-Length: 0) fastify runs no
      // parser and leaves body undefined; the raw request is the same stream either way.
      // Bytes arriving count as activity: a long upload keeps its session alive.
      const onProgress = manager.transferActivity(request.params.id);
      const written = await files.upload(file, request.raw, { maxBytes, mode, onProgress });
      return reply.status(201).send(written);
    },
  );

  const downloadQuery = {
    type: 'object',
    required: ['path'],
    additionalProperties: false,
    properties: {
      path: pathQuery,
      maxBytes: {
        type: 'string',
        pattern: '^[0-9]{1,15}$',
        description: `A lower limit than the server's ${maxBytes} bytes: a file over it is a 413, refused from its size before any of it is read`,
      },
    },
  } as const;
  const limitOf = (request: FastifyRequest<FileRequest>): [number, string | undefined] => {
    const asked = request.query.maxBytes === undefined ? undefined : Number(request.query.maxBytes);
    return asked !== undefined && asked < maxBytes ? [asked, "the request's maxBytes"] : [maxBytes, undefined];
  };

  app.get<FileRequest>(
    '/v1/sessions/:id/files',
    {
      // fastify's automatic HEAD route would run this handler and read the whole file
      // from the guest only to discard it; the HEAD route below only stats it.
      exposeHeadRoute: false,
      schema: {
        summary: 'Download a file: its raw bytes (application/octet-stream)',
        description: `Streams the file from the sandbox over SFTP, as the guest user. At most ${maxBytes} bytes (413 beyond).`,
        tags: ['files'],
        params: sessionIdParams,
        querystring: downloadQuery,
        produces: ['application/octet-stream'],
        response: { 200: { description: 'The file', type: 'string', format: 'binary' }, ...errors },
      },
    },
    async (request, reply) => {
      const connection = manager.connection(request.params.id);
      const file = sandboxPath(request.query.path);
      const files = await SandboxFiles.on(connection);
      // Bytes the client reads count as activity; a client that stops reading does not.
      const [limit, limitName] = limitOf(request);
      const download = await files.download(file, limit, manager.transferActivity(request.params.id), limitName);
      // fastify pipes a stream payload to the response with back-pressure, and destroys it
      // (which closes the SFTP handle) if the client goes away first.
      return fileHeaders(reply, download.size, download.path).send(download.stream);
    },
  );

  app.head<FileRequest>(
    '/v1/sessions/:id/files',
    {
      schema: {
        summary: "A download's headers (size, name) without its body",
        tags: ['files'],
        params: sessionIdParams,
        querystring: downloadQuery,
      },
    },
    async (request, reply) => {
      const connection = manager.connection(request.params.id);
      const file = sandboxPath(request.query.path);
      const files = await SandboxFiles.on(connection);
      const info = await files.inspect(file, ...limitOf(request));
      return fileHeaders(reply, info.size, info.path).send();
    },
  );
}

function fileHeaders(reply: FastifyReply, size: number, file: string): FastifyReply {
  return reply
    .type('application/octet-stream')
    .header('content-length', String(size))
    .header('content-disposition', attachmentDisposition(path.posix.basename(file)))
    .header('cache-control', 'no-store');
}
