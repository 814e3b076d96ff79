import type { FastifyInstance } from 'fastify';
import type { WebSocket } from 'ws';
import type { GuestProcess } from '../../processes/guest-process.js';
import type { ProcessLimits } from '../../processes/limits.js';
import type { ReaderTarget } from '../../processes/readers.js';
import { pidParams } from './processes.js';

/** Output sent but not yet written to the client's socket, beyond which the reader waits. */
const SOCKET_HIGH_WATER = 1024 * 1024;
/** Longest input message: a paste into a terminal. */
const MAX_INPUT_MESSAGE = 256 * 1024;
/** Input received but not yet written to the process, beyond which the socket stops reading. */
const INPUT_HIGH_WATER = 1024 * 1024;

/**
 * GET /v1/sessions/:id/processes/:pid/ws: the process as a WebSocket that xterm.js (its attach
 * addon) drives as it is. Server to client: binary frames of output (stdout and stderr as they
 * came; a terminal's are one), then a close 1000 whose reason is the exit as JSON. Client to
 * server: binary or text frames are standard input, except a text frame that is exactly a
 * JSON object {"type":"resize","cols":C,"rows":R}, which resizes the terminal.
 */
export function processSocketRoute(app: FastifyInstance, opts: { find: (id: string, pid: string) => Promise<GuestProcess>; limits: ProcessLimits }): void {
  // The process each admitted upgrade found, from preValidation to the handler.
  const found = new WeakMap<object, GuestProcess>();
  app.get<{ Params: { id: string; pid: string }; Querystring: { from?: string } }>(
    '/v1/sessions/:id/processes/:pid/ws',
    {
      websocket: true,
      schema: {
        summary: 'WebSocket: output as binary frames, stdin and resize messages in (xterm.js attach addon compatible)',
        tags: ['processes'],
        params: pidParams,
        querystring: { type: 'object', additionalProperties: false, properties: { from: { type: 'string', pattern: '^[0-9]{1,15}$' } } },
      },
      // Before the upgrade: a session or process that is not there is an HTTP error, never a socket.
      preValidation: async (request) => {
        found.set(request.raw, await opts.find(request.params.id, request.params.pid));
      },
    },
    (socket, request) => {
      const process = found.get(request.raw);
      found.delete(request.raw);
      if (!process) return socket.close(1011, 'no process');
      const from = request.query.from === undefined ? undefined : Number(request.query.from);
      followOverSocket(socket, process, from);
    },
  );
}

/** Streams a process's output to a WebSocket and its messages to the process (the protocol above). */
export function followOverSocket(socket: WebSocket, process: GuestProcess, from: number | undefined): void {
  let unsent = 0;
  let waiting: (() => void) | undefined;
  const send = (data: Buffer): boolean => {
    unsent += data.length;
    socket.send(data, { binary: true }, () => {
      unsent -= data.length;
      if (waiting && unsent < SOCKET_HIGH_WATER / 2) {
        const resume = waiting;
        waiting = undefined;
        resume();
      }
    });
    return unsent < SOCKET_HIGH_WATER;
  };
  const target: ReaderTarget = {
    output: (chunk) => send(chunk.data),
    // In the stream itself, as a terminal would show it: an xterm has no other channel.
    dropped: (_offset, bytes) => send(Buffer.from(`\r\n[sbx: ${bytes} bytes of output dropped]\r\n`)),
    drained: (callback) => {
      waiting = callback;
    },
    exit: (exit) => socket.close(1000, JSON.stringify({ exitCode: exit.exitCode, signal: exit.signal, reason: exit.reason })),
    evicted: (reason) => socket.close(1013, reason.slice(0, 120)),
  };
  let reader: ReturnType<GuestProcess['attach']>;
  try {
    reader = process.attach(target, from);
  } catch (err) {
    socket.close(1013, (err as Error).message.slice(0, 120));
    return;
  }
  socket.on('close', () => reader.close());
  socket.on('error', () => reader.close());
  // Input is written one message at a time, in order: a paste waits for the last one's room.
  // Messages waiting their turn are counted: past INPUT_HIGH_WATER the socket stops reading
  // (the client's sends back up in TCP), and a process that refuses its input ends the socket.
  let input = Promise.resolve();
  let queued = 0;
  socket.on('message', (data: Buffer | ArrayBuffer | Buffer[], isBinary: boolean) => {
    const bytes = Array.isArray(data) ? Buffer.concat(data) : Buffer.isBuffer(data) ? data : Buffer.from(data);
    if (bytes.length > MAX_INPUT_MESSAGE) return socket.close(1009, `input messages are at most ${MAX_INPUT_MESSAGE} bytes`);
    if (!isBinary) {
      const resize = asResize(bytes);
      if (resize) {
        try {
          process.resize(resize.cols, resize.rows);
        } catch {
          // not a terminal: a resize means nothing to it
        }
        return;
      }
    }
    queued += bytes.length;
    if (queued > INPUT_HIGH_WATER) socket.pause();
    input = input
      .then(() => process.write(bytes, false))
      .catch((err: unknown) => socket.close(1013, (err as Error).message.slice(0, 120)))
      .finally(() => {
        queued -= bytes.length;
        if (queued <= INPUT_HIGH_WATER / 2) socket.resume();
      });
  });
}

function asResize(bytes: Buffer): { cols: number; rows: number } | undefined {
  if (bytes.length > 100 || bytes[0] !== 0x7b) return undefined;
  try {
    const value = JSON.parse(bytes.toString('utf8')) as Record<string, unknown>;
    const { type, cols, rows } = value;
    const ok = (n: unknown) => typeof n === 'number' && Number.isInteger(n) && n >= 1 && n <= 1000;
    if (type === 'resize' && ok(cols) && ok(rows) && Object.keys(value).length === 3) return { cols: cols as number, rows: rows as number };
  } catch {
    return undefined;
  }
  return undefined;
}
