import type { FastifyRequest } from 'fastify';
import { InvalidRequestError } from '../errors.js';
import type { GuestProcess } from '../processes/guest-process.js';
import { dimension, parseProcessSpec } from '../processes/process-request.js';
import type { ProcessTable } from '../processes/process-table.js';
import type { OutputReader, ProcessExit, ReaderTarget } from '../processes/readers.js';
import { bytesField, type ConnectStream, streamTimers } from './connect-protocol.js';
import { e2bFailure, E2bUnsupportedError, type ConnectCode } from './errors.js';
import { checkUser, envdPath } from './envd-access.js';

/** What a call of the Process service needs: the session's process table and the sandbox's env vars. */
export interface ProcessContext {
  table: ProcessTable;
  envVars: Record<string, string>;
  /** Opens the call's response as a stream (it takes one of the tenant's stream slots, or throws a 429). */
  openStream: () => ConnectStream;
}

/** E2B's ProcessConfig and tag of the processes started through this surface (for List and tag selectors). */
const started = new WeakMap<GuestProcess, { config: Record<string, unknown>; tag?: string }>();

const KEEPALIVE = { event: { keepalive: {} } };

function object(value: unknown, field: string): Record<string, unknown> {
  if (value === undefined || value === null) return {};
  if (typeof value !== 'object' || Array.isArray(value)) throw new InvalidRequestError(`${field} must be an object`);
  return value as Record<string, unknown>;
}

function ptySize(pty: unknown, field: string): { cols: number; rows: number } {
  const size = object(object(pty, field).size, `${field}.size`);
  return { cols: dimension(size.cols, `${field}.size.cols`), rows: dimension(size.rows, `${field}.size.rows`) };
}

/** A ProcessSelector: {pid} or {tag}. */
function select(ctx: ProcessContext, message: Record<string, unknown>): GuestProcess {
  const selector = object(message.process, 'process');
  if (typeof selector.pid === 'number') return ctx.table.get(selector.pid);
  if (typeof selector.tag === 'string') {
    for (const info of ctx.table.list(false)) {
      const process = ctx.table.get(info.pid);
      if (started.get(process)?.tag === selector.tag) return process;
    }
    return ctx.table.get(-1);
  }
  throw new InvalidRequestError('process must name a pid or a tag');
}

/** E2B's EndEvent of an exit. */
function endEvent(exit: ProcessExit): Record<string, unknown> {
  const exited = exit.exitCode !== null;
  return {
    exitCode: exit.exitCode ?? -1,
    exited,
    status: exited ? `exit status ${exit.exitCode}` : `signal: ${(exit.signal ?? 'killed').toLowerCase()}`,
    ...(exit.reason === 'connection_lost' ? { error: "the sandbox's connection was lost" } : {}),
  };
}

/**
 * Follows a process's output on a Connect stream: the start event, then data events as the
 * process's log has them (the reader of the processes API: a client that does not read holds
 * the process back, then is evicted after readerStallMs, and the log stays bounded), then the end.
 */
function follow(request: FastifyRequest, stream: ConnectStream, process: GuestProcess, from: number): void {
  streamTimers(request, stream, () => KEEPALIVE);
  const pty = process.spec.pty !== undefined;
  const target: ReaderTarget = {
    output: (chunk) => stream.send({ event: { data: { [pty ? 'pty' : chunk.stream]: chunk.data.toString('base64') } } }),
    dropped: () => true,
    drained: (callback) => stream.drained(callback),
    exit: (exit) => {
      stream.send({ event: { end: endEvent(exit) } });
      stream.end();
    },
    evicted: (reason) => stream.end({ code: 'resource_exhausted', message: reason }),
  };
  let reader: OutputReader;
  try {
    // It reads from the next microtask on: the start event goes first.
    reader = process.attach(target, from);
  } catch (err) {
    stream.end(streamFailure(err));
    return;
  }
  stream.send({ event: { start: { pid: process.pid } } });
  stream.onClose(() => reader.close());
}

/** An error after the stream began, as its end-of-stream error. */
function streamFailure(err: unknown): { code: ConnectCode; message: string } {
  const failure = e2bFailure(err);
  return { code: failure.connectCode, message: failure.message };
}

/** The calls of E2B's process.Process service (spec/envd/process/process.proto). */
export async function processCall(method: string, message: Record<string, unknown>, ctx: ProcessContext, request: FastifyRequest): Promise<unknown> {
  checkUser(request);
  switch (method) {
    case 'Start': {
      const config = object(message.process, 'process');
      const args = config.args ?? [];
      if (typeof config.cmd !== 'string' || !Array.isArray(args)) throw new InvalidRequestError('process.cmd must be a string and process.args strings');
      const envs = object(config.envs, 'process.envs');
      // argv stays argv: the SDK's `bash -l -c <cmd>` is the user's own shell command, run as the guest user.
      const spec = parseProcessSpec({
        argv: [config.cmd, ...(args as unknown[])],
        ...(config.cwd !== undefined && config.cwd !== '' ? { cwd: envdPath(config.cwd, 'process.cwd') } : {}),
        env: { ...ctx.envVars, ...envs },
        stdin: message.stdin === true,
        ...(message.pty !== undefined && message.pty !== null ? { pty: ptySize(message.pty, 'pty') } : {}),
      });
      // The stream (and its slot) first: a tenant at its stream limit starts nothing.
      const stream = ctx.openStream();
      let process: GuestProcess;
      try {
        process = await ctx.table.start(spec);
      } catch (err) {
        stream.end(streamFailure(err));
        return undefined;
      }
      started.set(process, { config, ...(typeof message.tag === 'string' ? { tag: message.tag } : {}) });
      follow(request, stream, process, 0);
      return undefined;
    }
    case 'Connect': {
      const process = select(ctx, message);
      follow(request, ctx.openStream(), process, process.outputEnd);
      return undefined;
    }
    case 'List':
      return {
        processes: ctx.table.list(false).map((info) => {
          const known = started.get(ctx.table.get(info.pid));
          const config = known?.config ?? { cmd: info.argv?.[0] ?? '/bin/bash', args: info.argv?.slice(1) ?? ['-l', '-c', info.cmd ?? ''], envs: {} };
          return { config, pid: info.pid, ...(known?.tag ? { tag: known.tag } : {}) };
        }),
      };
    case 'SendInput': {
      const input = object(message.input, 'input');
      await select(ctx, message).write(bytesField(input.stdin ?? input.pty, 'input'), false);
      return {};
    }
    case 'CloseStdin':
      await select(ctx, message).write(Buffer.alloc(0), true);
      return {};
    case 'SendSignal': {
      const signal = message.signal;
      const name = signal === 'SIGNAL_SIGKILL' || signal === 9 ? 'KILL' : signal === 'SIGNAL_SIGTERM' || signal === 15 ? 'TERM' : undefined;
      if (!name) throw new InvalidRequestError('signal must be SIGNAL_SIGKILL or SIGNAL_SIGTERM');
      await select(ctx, message).signal(name);
      return {};
    }
    case 'Update': {
      const size = ptySize(message.pty, 'pty');
      select(ctx, message).resize(size.cols, size.rows);
      return {};
    }
    case 'StreamInput':
      throw new E2bUnsupportedError('StreamInput: client streaming is not served (connect-web cannot send it either); use SendInput');
    default:
      throw new E2bUnsupportedError(`process.Process/${method.slice(0, 64)} is not a method of envd's process service`);
  }
}
