import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { InvalidRequestError } from '../../errors.js';
import { SIGNALS, type GuestProcess, type SignalName } from '../../processes/guest-process.js';
import { DEFAULT_PROCESS_LIMITS, type ProcessLimits } from '../../processes/limits.js';
import type { OutputChunk } from '../../processes/output-log.js';
import { dimension, parseProcessSpec } from '../../processes/process-request.js';
import type { ProcessExit, ReaderTarget } from '../../processes/readers.js';
import { sessionProcesses } from '../../processes/session-processes.js';
import type { FileSessions, ToolSessions } from '../../sessions/ports.js';
import { sessionIdParams } from '../schemas.js';
import type { StreamSlots } from '../stream-slots.js';
import { processSocketRoute } from './process-socket.js';

export interface ProcessRoutesOptions {
  manager: Pick<ToolSessions, 'attachment' | 'connection' | 'displayOf'> & Pick<FileSessions, 'transferActivity'>;
  streams: StreamSlots;
  limits?: ProcessLimits;
}

interface PidRequest {
  Params: { id: string; pid: string };
  Querystring: { from?: string };
}

const HEARTBEAT_MS = 15_000;
/** Most stdin one request carries (base64 or text): a terminal's paste, a file fed in pieces. */
const MAX_STDIN_BYTES = 512 * 1024;
/** Most output one JSON read answers. */
const READ_MAX_BYTES = 256 * 1024;

export const pidParams = {
  type: 'object',
  required: ['id', 'pid'],
  properties: { id: sessionIdParams.properties.id, pid: { type: 'string', pattern: '^[0-9]{1,7}$', description: 'The process id the start answered' } },
} as const;

const errors = {
  400: { $ref: 'Error#' },
  404: { $ref: 'Error#' },
  409: { $ref: 'Error#' },
  410: { $ref: 'Error#' },
  429: { $ref: 'Error#' },
  502: { $ref: 'Error#' },
};

const fromQuery = {
  type: 'object',
  additionalProperties: false,
  properties: { from: { type: 'string', pattern: '^[0-9]{1,15}$', description: 'Byte offset to replay from (default: the oldest output still held)' } },
} as const;

/**
 * The process API (docs/api.md#processes): start a process in the guest over the session's
 * SSH connection, follow its output (SSE here, WebSocket in process-socket.ts), write its
 * stdin, signal, kill, resize its terminal, list.
 */
export async function processRoutes(app: FastifyInstance, opts: ProcessRoutesOptions): Promise<void> {
  const { manager, streams } = opts;
  const limits = opts.limits ?? DEFAULT_PROCESS_LIMITS;
  const table = (id: string) => sessionProcesses(manager, id, manager.displayOf(id), limits);
  const find = async (id: string, pid: string): Promise<GuestProcess> => (await table(id)).get(Number(pid));

  app.post<{ Params: { id: string } }>(
    '/v1/sessions/:id/processes',
    {
      schema: {
        summary: 'Start a process in the sandbox (argv or cmd), as the sandbox user',
        description:
          'Body: {argv: [..] | cmd: "..", cwd?, env?: {NAME: "value"}, user?: "user", stdin?: bool, pty?: true | {cols, rows}, timeoutSeconds?}. ' +
          'argv elements are passed as arguments, never read by a shell; cmd runs as `bash -lc <cmd>`. ' +
          `At most ${limits.maxRunning} processes run at once per session (429 session_process_limit). Answers 201 with the process (its pid); ` +
          'with Accept: text/event-stream, a `start` event with it instead, then the output as .../output streams it.',
        tags: ['processes'],
        params: sessionIdParams,
        body: { type: 'object' },
        response: { 201: { type: 'object', additionalProperties: true }, ...errors },
      },
    },
    async (request, reply) => {
      const processes = await table(request.params.id);
      const spec = parseProcessSpec(request.body);
      // Accept: text/event-stream: start and follow in one request (one round trip less to
      // the first byte): a `start` event with the process, then what .../output sends.
      const stream = (request.headers.accept ?? '').includes('text/event-stream');
      const release = stream ? streams.open(request, reply) : undefined;
      try {
        const started = await processes.start(spec);
        if (!stream) return reply.status(201).send(started.info());
        followOverSse(reply, started, 0, manager.transferActivity(request.params.id), { name: 'start', data: started.info() });
      } catch (err) {
        release?.();
        throw err;
      }
    },
  );

  app.get<{ Params: { id: string }; Querystring: { all?: string } }>(
    '/v1/sessions/:id/processes',
    {
      schema: {
        summary: 'The running processes (?all=true: finished ones still kept too)',
        tags: ['processes'],
        params: sessionIdParams,
        querystring: { type: 'object', additionalProperties: false, properties: { all: { type: 'string', enum: ['true', 'false'] } } },
        response: { 200: { type: 'object', additionalProperties: true }, ...errors },
      },
    },
    async (request) => ({ processes: (await table(request.params.id)).list(request.query.all === 'true') }),
  );

  app.get<PidRequest>(
    '/v1/sessions/:id/processes/:pid',
    {
      schema: {
        summary: 'One process: running or its exit',
        tags: ['processes'],
        params: pidParams,
        response: { 200: { type: 'object', additionalProperties: true }, ...errors },
      },
    },
    async (request) => (await find(request.params.id, request.params.pid)).info(),
  );

  app.get<PidRequest>(
    '/v1/sessions/:id/processes/:pid/output',
    {
      schema: {
        summary: "Server-Sent Events: the process's output (a replay of what is held, then live), then its exit",
        description:
          'Events: `output` {offset, stream: stdout|stderr, data (base64)}, `dropped` {offset, bytes} (output dropped before this reader got it), ' +
          "`exit` {exitCode, signal, reason, outputBytes} (last), `evicted` {reason}. Each event's id is the offset after it: reconnect with " +
          `Last-Event-ID (or ?from=) to go on where you left off. ${limits.bufferBytesPerProcess} bytes are held per process for replay.`,
        tags: ['processes'],
        params: pidParams,
        querystring: fromQuery,
        produces: ['text/event-stream'],
        response: { 200: { description: 'text/event-stream', type: 'string' }, ...errors },
      },
    },
    async (request, reply) => {
      const { id } = request.params;
      const from = startOffset(request);
      const release = streams.open(request, reply);
      let process: GuestProcess;
      try {
        process = await find(id, request.params.pid);
      } catch (err) {
        release();
        throw err;
      }
      try {
        followOverSse(reply, process, from, manager.transferActivity(id));
      } catch (err) {
        release();
        throw err;
      }
    },
  );

  app.get<{ Params: { id: string; pid: string }; Querystring: { from?: string; maxBytes?: string } }>(
    '/v1/sessions/:id/processes/:pid/read',
    {
      schema: {
        summary: 'The output held from an offset, as JSON, without waiting (for pollers: the MCP tool)',
        description: 'Answers {from, next, dropped, stdout, stderr (base64), running, exitCode, signal, reason}: read again from `next`.',
        tags: ['processes'],
        params: pidParams,
        querystring: {
          type: 'object',
          additionalProperties: false,
          properties: {
            from: fromQuery.properties.from,
            maxBytes: { type: 'string', pattern: '^[0-9]{1,7}$', description: `At most this much output (default and most ${READ_MAX_BYTES})` },
          },
        },
        response: { 200: { type: 'object', additionalProperties: true }, ...errors },
      },
    },
    async (request) => {
      const process = await find(request.params.id, request.params.pid);
      const from = Number(request.query.from ?? 0);
      const slice = process.read(from, Math.min(READ_MAX_BYTES, Number(request.query.maxBytes ?? READ_MAX_BYTES)));
      // Whole chunks are returned: cut to the bound so that one answer stays small.
      let left = Math.min(READ_MAX_BYTES, Number(request.query.maxBytes ?? READ_MAX_BYTES));
      const out = { stdout: [] as Buffer[], stderr: [] as Buffer[] };
      let next = from + slice.dropped;
      for (const chunk of slice.chunks) {
        if (left <= 0) break;
        const data = chunk.data.subarray(0, left);
        out[chunk.stream].push(data);
        left -= data.length;
        next = chunk.offset + data.length;
      }
      const info = process.info();
      return {
        from,
        next,
        dropped: slice.dropped,
        stdout: Buffer.concat(out.stdout).toString('base64'),
        stderr: Buffer.concat(out.stderr).toString('base64'),
        running: info.running,
        more: next < info.outputBytes,
        exitCode: info.exitCode,
        signal: info.signal,
        reason: info.reason,
      };
    },
  );

  app.post<{ Params: { id: string; pid: string }; Body: { data?: string; encoding?: 'utf8' | 'base64'; eof?: boolean } }>(
    '/v1/sessions/:id/processes/:pid/stdin',
    {
      bodyLimit: MAX_STDIN_BYTES * 2,
      schema: {
        summary: "Write to the process's standard input (eof: true closes it after)",
        tags: ['processes'],
        params: pidParams,
        body: {
          type: 'object',
          additionalProperties: false,
          properties: {
            data: { type: 'string', maxLength: MAX_STDIN_BYTES * 2 },
            encoding: { type: 'string', enum: ['utf8', 'base64'], description: 'Of data (default utf8)' },
            eof: { type: 'boolean' },
          },
        },
        response: { 204: { type: 'null' }, ...errors },
      },
    },
    async (request, reply) => {
      const { data = '', encoding = 'utf8', eof = false } = request.body;
      const bytes = encoding === 'base64' ? decodeBase64(data, 'data') : Buffer.from(data, 'utf8');
      if (bytes.length > MAX_STDIN_BYTES) throw new InvalidRequestError(`data must be at most ${MAX_STDIN_BYTES} bytes per request`);
      await (await find(request.params.id, request.params.pid)).write(bytes, eof);
      return reply.status(204).send();
    },
  );

  app.post<{ Params: { id: string; pid: string }; Body: { signal: SignalName } }>(
    '/v1/sessions/:id/processes/:pid/signal',
    {
      schema: {
        summary: 'Send a signal to the process (and every process of its session in the guest)',
        tags: ['processes'],
        params: pidParams,
        body: { type: 'object', required: ['signal'], additionalProperties: false, properties: { signal: { type: 'string', enum: [...SIGNALS] } } },
        response: { 204: { type: 'null' }, ...errors },
      },
    },
    async (request, reply) => {
      await (await find(request.params.id, request.params.pid)).signal(request.body.signal);
      return reply.status(204).send();
    },
  );

  app.post<{ Params: { id: string; pid: string } }>(
    '/v1/sessions/:id/processes/:pid/kill',
    {
      schema: {
        summary: `Kill the process: SIGTERM, then SIGKILL after ${limits.killGraceMs / 1000} s if it still runs; answers once it ended`,
        tags: ['processes'],
        params: pidParams,
        response: { 200: { type: 'object', additionalProperties: true }, ...errors },
      },
    },
    async (request) => {
      const process = await find(request.params.id, request.params.pid);
      await process.kill();
      return process.info();
    },
  );

  app.post<{ Params: { id: string; pid: string }; Body: { cols: number; rows: number } }>(
    '/v1/sessions/:id/processes/:pid/resize',
    {
      schema: {
        summary: "Resize a pty process's terminal",
        tags: ['processes'],
        params: pidParams,
        body: { type: 'object', required: ['cols', 'rows'], additionalProperties: false, properties: { cols: { type: 'integer' }, rows: { type: 'integer' } } },
        response: { 204: { type: 'null' }, ...errors },
      },
    },
    async (request, reply) => {
      const cols = dimension(request.body.cols, 'cols');
      const rows = dimension(request.body.rows, 'rows');
      (await find(request.params.id, request.params.pid)).resize(cols, rows);
      return reply.status(204).send();
    },
  );

  processSocketRoute(app, { find, limits });
}

/** ?from=, else Last-Event-ID (a reconnecting EventSource), else undefined (all that is held). */
function startOffset(request: FastifyRequest<{ Querystring: { from?: string } }>): number | undefined {
  if (request.query.from !== undefined) return Number(request.query.from);
  const last = request.headers['last-event-id'];
  if (typeof last === 'string' && /^[0-9]{1,15}$/.test(last)) return Number(last);
  return undefined;
}

export function decodeBase64(data: string, field: string): Buffer {
  if (!/^[A-Za-z0-9+/]*={0,2}$/.test(data) || data.length % 4 !== 0) throw new InvalidRequestError(`${field} is not base64`);
  return Buffer.from(data, 'base64');
}

/**
 * Streams one reader's output as SSE on the hijacked response, with back-pressure from the
 * socket. The reader is attached before the response starts, so a process over its readers'
 * cap answers 429 as JSON.
 */
function followOverSse(
  reply: FastifyReply,
  process: GuestProcess,
  from: number | undefined,
  activity: () => void,
  first?: { name: string; data: unknown },
): void {
  const res = reply.raw;
  const event = (name: string, id: number | undefined, data: unknown): boolean =>
    res.write(`${id === undefined ? '' : `id: ${id}\n`}event: ${name}\ndata: ${JSON.stringify(data)}\n\n`);
  let heartbeat: NodeJS.Timeout | undefined;
  const end = () => {
    clearInterval(heartbeat);
    res.end();
  };
  const target: ReaderTarget = {
    output: (chunk: OutputChunk) => {
      activity();
      return event('output', chunk.offset + chunk.data.length, { offset: chunk.offset, stream: chunk.stream, data: chunk.data.toString('base64') });
    },
    dropped: (offset, bytes) => event('dropped', offset, { offset, bytes }),
    drained: (callback) => res.once('drain', callback),
    exit: (exit: ProcessExit, at: number) => {
      event('exit', at, { ...exit, outputBytes: at });
      end();
    },
    evicted: (reason) => {
      event('evicted', undefined, { reason });
      end();
    },
  };
  const reader = process.attach(target, from);
  reply.hijack();
  res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-store', connection: 'keep-alive', 'x-accel-buffering': 'no' });
  if (first) event(first.name, undefined, first.data);
  heartbeat = setInterval(() => res.write(': still here\n\n'), HEARTBEAT_MS);
  res.once('close', () => {
    clearInterval(heartbeat);
    reader.close();
  });
}
