import type { FastifyInstance } from 'fastify';
import { FsCalls, FsConflictError, MAX_LIST_DEPTH, MAX_LIST_ENTRIES } from '../../files/fs-calls.js';
import { DirectoryWatch, WATCH_INTERVAL_MS, type FsChange } from '../../files/fs-watch.js';
import { inotifyTrigger } from '../../files/fs-watch-trigger.js';
import { MAX_PATH_LENGTH, sandboxPath } from '../../files/sandbox-path.js';
import type { FileSessions } from '../../sessions/ports.js';
import { sessionIdParams } from '../schemas.js';
import type { StreamSlots } from '../stream-slots.js';

export interface FsRoutesOptions {
  manager: Pick<FileSessions, 'connection'>;
  streams: StreamSlots;
}

const HEARTBEAT_MS = 15_000;
/** Unread watch events a client may leave buffered before it is dropped. */
const WATCH_MAX_BUFFERED_BYTES = 1024 * 1024;

const pathField = { type: 'string', minLength: 1, maxLength: MAX_PATH_LENGTH, description: 'Absolute path in the sandbox' } as const;
const errors = {
  400: { $ref: 'Error#' },
  403: { $ref: 'Error#' },
  404: { $ref: 'Error#' },
  409: { $ref: 'Error#' },
  410: { $ref: 'Error#' },
  429: { $ref: 'Error#' },
  502: { $ref: 'Error#' },
};
const entrySchema = {
  type: 'object',
  properties: {
    name: { type: 'string' },
    path: { type: 'string' },
    type: { type: 'string', enum: ['file', 'dir', 'symlink', 'other'] },
    size: { type: 'integer' },
    mode: { type: 'string', description: 'Permission bits in octal, e.g. 0644' },
    mtime: { type: 'string', format: 'date-time' },
    target: { type: 'string', description: "A symlink's target (stat)" },
  },
} as const;
const noExtra = (properties: Record<string, unknown>, required: string[]) => ({ type: 'object', additionalProperties: false, required, properties });

/**
 * The filesystem calls (docs/api.md#filesystem): list, stat, mkdir -p, move, remove and a
 * watch as SSE, over SFTP on the session's SSH connection, as the guest user. The streamed
 * up- and downloads stay in files.ts.
 */
export async function fsRoutes(app: FastifyInstance, opts: FsRoutesOptions): Promise<void> {
  const { manager, streams } = opts;
  const fsOf = async (id: string) => {
    const connection = manager.connection(id);
    return new FsCalls(await connection.sftp(), connection);
  };

  app.get<{ Params: { id: string }; Querystring: { path: string; depth?: string } }>(
    '/v1/sessions/:id/fs/list',
    {
      schema: {
        summary: 'List a directory: entries with name, type, size, mode, mtime',
        description: `depth 1-${MAX_LIST_DEPTH} (default 1: the directory's own entries); symlinks are not followed; at most ${MAX_LIST_ENTRIES} entries (then truncated: true).`,
        tags: ['files'],
        params: sessionIdParams,
        querystring: noExtra({ path: pathField, depth: { type: 'string', pattern: `^[1-${MAX_LIST_DEPTH}]$` } }, ['path']),
        response: {
          200: { type: 'object', properties: { path: { type: 'string' }, truncated: { type: 'boolean' }, entries: { type: 'array', items: entrySchema } } },
          ...errors,
        },
      },
    },
    async (request) => (await fsOf(request.params.id)).list(sandboxPath(request.query.path), Number(request.query.depth ?? 1)),
  );

  app.get<{ Params: { id: string }; Querystring: { path: string } }>(
    '/v1/sessions/:id/fs/stat',
    {
      schema: {
        summary: 'One file, directory or symlink (not followed)',
        tags: ['files'],
        params: sessionIdParams,
        querystring: noExtra({ path: pathField }, ['path']),
        response: { 200: entrySchema, ...errors },
      },
    },
    async (request) => (await fsOf(request.params.id)).stat(sandboxPath(request.query.path)),
  );

  app.post<{ Params: { id: string }; Body: { path: string; mode?: string } }>(
    '/v1/sessions/:id/fs/mkdir',
    {
      schema: {
        summary: 'Make a directory and its missing parents (mkdir -p)',
        tags: ['files'],
        params: sessionIdParams,
        body: noExtra({ path: pathField, mode: { type: 'string', pattern: '^[0-7]{3,4}$', description: 'Octal, default 0755' } }, ['path']),
        response: { 201: entrySchema, ...errors },
      },
    },
    async (request, reply) => {
      const mode = request.body.mode === undefined ? undefined : Number.parseInt(request.body.mode, 8);
      const made = await (await fsOf(request.params.id)).mkdir(sandboxPath(request.body.path), mode);
      return reply.status(201).send(made);
    },
  );

  app.post<{ Params: { id: string }; Body: { from: string; to: string; overwrite?: boolean } }>(
    '/v1/sessions/:id/fs/move',
    {
      schema: {
        summary: 'Move (rename) a file or directory; an existing destination is replaced only with overwrite: true',
        tags: ['files'],
        params: sessionIdParams,
        body: noExtra({ from: pathField, to: pathField, overwrite: { type: 'boolean' } }, ['from', 'to']),
        response: { 200: entrySchema, ...errors },
      },
    },
    async (request) => {
      const from = sandboxPath(request.body.from, 'from');
      const to = sandboxPath(request.body.to, 'to');
      return (await fsOf(request.params.id)).move(from, to, request.body.overwrite === true);
    },
  );

  app.post<{ Params: { id: string }; Body: { path: string; recursive?: boolean } }>(
    '/v1/sessions/:id/fs/remove',
    {
      schema: {
        summary: 'Remove a file, a symlink or an empty directory; a directory and everything in it only with recursive: true',
        tags: ['files'],
        params: sessionIdParams,
        body: noExtra({ path: pathField, recursive: { type: 'boolean' } }, ['path']),
        response: { 204: { type: 'null' }, ...errors },
      },
    },
    async (request, reply) => {
      await (await fsOf(request.params.id)).remove(sandboxPath(request.body.path), request.body.recursive === true);
      return reply.status(204).send();
    },
  );

  app.get<{ Params: { id: string }; Querystring: { path: string } }>(
    '/v1/sessions/:id/fs/watch',
    {
      schema: {
        summary: "Server-Sent Events: changes to a directory's entries (created, modified, removed)",
        description:
          `The guest's inotify (inotifywait) says when to read the directory again over SFTP and compare (mtime has whole seconds); in an image without it, it is read every ${WATCH_INTERVAL_MS} ms. Events: \`created\`, \`modified\`, \`removed\` ` +
          `with the entry as data; \`error\` {message} ends the stream (the directory went away, or has more than ${MAX_LIST_ENTRIES} entries). A watch is one of the tenant's event streams.`,
        tags: ['files'],
        params: sessionIdParams,
        querystring: noExtra({ path: pathField }, ['path']),
        produces: ['text/event-stream'],
        response: { 200: { description: 'text/event-stream', type: 'string' }, ...errors },
      },
    },
    async (request, reply) => {
      const dir = sandboxPath(request.query.path);
      const release = streams.open(request, reply);
      const res = reply.raw;
      let heartbeat: NodeJS.Timeout | undefined;
      let watch: DirectoryWatch | undefined;
      // From the start: a client gone during the awaits below (a guest can make inotifywait's
      // setup take seconds) must not leave a watch that nobody reads.
      let gone = res.closed;
      res.once('close', () => {
        gone = true;
        clearInterval(heartbeat);
        watch?.stop();
      });
      // Nobody to answer: the reply is ours (never fastify's), the slot goes.
      const abandon = () => {
        reply.hijack();
        release();
      };
      const send = (text: string) => {
        if (res.writableLength > WATCH_MAX_BUFFERED_BYTES) {
          watch?.stop();
          res.destroy();
          return;
        }
        res.write(text);
      };
      let fs: FsCalls;
      try {
        fs = await fsOf(request.params.id);
        const top = await fs.stat(dir);
        if (top.type !== 'dir') throw new FsConflictError(`${dir} is not a directory`, 'not_a_directory');
      } catch (err) {
        release();
        throw err;
      }
      if (gone) return abandon();
      const connection = manager.connection(request.params.id);
      const started = new DirectoryWatch(
        fs,
        dir,
        (change: FsChange) => send(`event: ${change.type}\ndata: ${JSON.stringify(change.entry)}\n\n`),
        (error) => {
          send(`event: error\ndata: ${JSON.stringify({ message: error.message })}\n\n`);
          clearInterval(heartbeat);
          res.end();
        },
        WATCH_INTERVAL_MS,
        (onEvent, onEnd) => inotifyTrigger((command) => connection.spawn(command), dir, onEvent, onEnd),
      );
      watch = started;
      try {
        await started.start();
      } catch (err) {
        release();
        throw err;
      }
      if (gone) {
        started.stop();
        return abandon();
      }
      reply.hijack();
      res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-store', connection: 'keep-alive', 'x-accel-buffering': 'no' });
      res.write(`event: ready\ndata: ${JSON.stringify({ path: dir, via: started.listening ? 'inotify' : 'poll' })}\n\n`);
      heartbeat = setInterval(() => send(': still here\n\n'), HEARTBEAT_MS);
    },
  );
}
