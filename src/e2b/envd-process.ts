import { Code, ConnectError, type HandlerContext, type ServiceImpl } from '@connectrpc/connect';
import type { MessageInitShape } from '@bufbuild/protobuf';
import { InvalidRequestError } from '../errors.js';
import type { GuestProcess } from '../processes/guest-process.js';
import { dimension, parseProcessSpec } from '../processes/process-request.js';
import type { ProcessTable } from '../processes/process-table.js';
import type { ProcessExit, ReaderTarget } from '../processes/readers.js';
import { E2bUnsupportedError } from './errors.js';
import { checkUser, envdPath } from './envd-access.js';
import { abortReason, envdCall, keepalive, type EnvdCall } from './envd-connect.js';
import { EventQueue } from './event-queue.js';
import {
  type ProcessConfig,
  type ProcessSelector,
  type PTY,
  Process,
  type ProcessEventSchema,
  type ProcessConfigSchema,
  Signal,
} from './gen/process/process_pb.js';

type EventInit = MessageInitShape<typeof ProcessEventSchema>;
type ConfigInit = MessageInitShape<typeof ProcessConfigSchema>;

/** E2B's ProcessConfig and tag of the processes started through this surface (for List and tag selectors). */
const started = new WeakMap<GuestProcess, { config: ConfigInit; tag?: string }>();

/**
 * Output waiting for Connect to write it, per stream: past this the process's reader waits
 * (and so the process is held back, then the reader evicted, as our own stream's readers are).
 */
const MAX_QUEUED_BYTES = 256 * 1024;

function ptySize(pty: PTY | undefined): { cols: number; rows: number } {
  return { cols: dimension(pty?.size?.cols, 'pty.size.cols'), rows: dimension(pty?.size?.rows, 'pty.size.rows') };
}

/** A ProcessSelector: {pid} or {tag}. */
function select(table: ProcessTable, selector: ProcessSelector | undefined): GuestProcess {
  const chosen = selector?.selector;
  if (chosen?.case === 'pid') return table.get(chosen.value);
  if (chosen?.case === 'tag') {
    for (const info of table.list(false)) {
      const process = table.get(info.pid);
      if (started.get(process)?.tag === chosen.value) return process;
    }
    return table.get(-1);
  }
  throw new InvalidRequestError('process must name a pid or a tag');
}

/** E2B's EndEvent of an exit. */
function endEvent(exit: ProcessExit): EventInit {
  const exited = exit.exitCode !== null;
  return {
    event: {
      case: 'end',
      value: {
        exitCode: exit.exitCode ?? -1,
        exited,
        status: exited ? `exit status ${exit.exitCode}` : `signal: ${(exit.signal ?? 'killed').toLowerCase()}`,
        ...(exit.reason === 'connection_lost' ? { error: "the sandbox's connection was lost" } : {}),
      },
    },
  };
}

/**
 * A process's output as a stream's events: the start event, then data events as the process's
 * log has them (the reader of the processes API: a client that does not read holds the process
 * back, then is evicted after readerStallMs, and the log stays bounded), then the end. The
 * stream ends when the client goes or the call's deadline passes (connect's signal).
 */
export async function* follow(ctx: HandlerContext, call: EnvdCall, process: GuestProcess, from: number): AsyncGenerator<{ event: EventInit }> {
  const queue = new EventQueue<EventInit>(MAX_QUEUED_BYTES);
  const pty = process.spec.pty !== undefined;
  const target: ReaderTarget = {
    output: (chunk) => queue.push({ event: { case: 'data', value: { output: { case: pty ? 'pty' : chunk.stream, value: chunk.data } } } }, chunk.data.length),
    dropped: () => true,
    drained: (callback) => queue.onDrain(callback),
    exit: (exit) => {
      queue.push(endEvent(exit));
      queue.end();
    },
    evicted: (reason) => {
      queue.end(new ConnectError(reason, Code.ResourceExhausted));
      // Evicted because nothing was taken for readerStallMs: the client does not read, so
      // the end-of-stream message would not reach it either. The connection goes.
      call.reply.raw.destroy();
    },
  };
  const reader = process.attach(target, from);
  const stopKeepalive = keepalive(ctx, queue, { event: { case: 'keepalive', value: {} } });
  const onAbort = () => queue.end(abortReason(ctx));
  ctx.signal.addEventListener('abort', onAbort);
  if (ctx.signal.aborted) onAbort(); // gone during the awaits before
  try {
    yield { event: { event: { case: 'start', value: { pid: process.pid } } } };
    for await (const event of queue) yield { event };
  } finally {
    ctx.signal.removeEventListener('abort', onAbort);
    stopKeepalive();
    reader.close();
  }
}

/** E2B's process.Process service (src/e2b/proto/process/process.proto), over the session's process table. */
export const processService: ServiceImpl<typeof Process> = {
  async *start(req, ctx) {
    const call = envdCall(ctx);
    checkUser(call.request);
    const config: ProcessConfig | undefined = req.process;
    if (!config || config.cmd === '') throw new InvalidRequestError('process.cmd must be a program');
    const { table, envVars } = await call.processes();
    // argv stays argv: the SDK's `bash -l -c <cmd>` is the user's own shell command, run as the guest user.
    const spec = parseProcessSpec({
      argv: [config.cmd, ...config.args],
      ...(config.cwd !== undefined && config.cwd !== '' ? { cwd: envdPath(config.cwd, 'process.cwd') } : {}),
      env: { ...envVars, ...config.envs },
      stdin: req.stdin === true,
      ...(req.pty !== undefined ? { pty: ptySize(req.pty) } : {}),
    });
    // The stream (and its slot) first: a tenant at its stream limit starts nothing.
    call.openStream();
    const process = await table.start(spec);
    const kept: ConfigInit = { cmd: config.cmd, args: config.args, envs: config.envs, ...(config.cwd !== undefined ? { cwd: config.cwd } : {}) };
    started.set(process, { config: kept, ...(req.tag !== undefined ? { tag: req.tag } : {}) });
    yield* follow(ctx, call, process, 0);
  },

  async *connect(req, ctx) {
    const call = envdCall(ctx);
    checkUser(call.request);
    const process = select((await call.processes()).table, req.process);
    call.openStream();
    yield* follow(ctx, call, process, process.outputEnd);
  },

  async list(_req, ctx) {
    const call = envdCall(ctx);
    checkUser(call.request);
    const { table } = await call.processes();
    return {
      processes: table.list(false).map((info) => {
        const known = started.get(table.get(info.pid));
        const config = known?.config ?? { cmd: info.argv?.[0] ?? '/bin/bash', args: info.argv?.slice(1) ?? ['-l', '-c', info.cmd ?? ''] };
        return { config, pid: info.pid, ...(known?.tag !== undefined ? { tag: known.tag } : {}) };
      }),
    };
  },

  async sendInput(req, ctx) {
    const call = envdCall(ctx);
    checkUser(call.request);
    const input = req.input?.input;
    await select((await call.processes()).table, req.process).write(Buffer.from(input?.value ?? new Uint8Array()), false);
    return {};
  },

  /**
   * Client streaming: a start naming the process, then its input in order. Each message is
   * written before the next is read, so a fast sender waits on the guest instead of queueing here.
   */
  async streamInput(requests, ctx) {
    const call = envdCall(ctx);
    checkUser(call.request);
    const { table } = await call.processes();
    let process: GuestProcess | undefined;
    for await (const req of requests) {
      const event = req.event;
      if (event.case === 'start') process = select(table, event.value.process);
      else if (event.case === 'data') {
        if (!process) throw new InvalidRequestError('StreamInput: the first message must be a start naming the process');
        await process.write(Buffer.from(event.value.input?.input.value ?? new Uint8Array()), false);
      }
    }
    return {};
  },

  async closeStdin(req, ctx) {
    const call = envdCall(ctx);
    checkUser(call.request);
    await select((await call.processes()).table, req.process).write(Buffer.alloc(0), true);
    return {};
  },

  async sendSignal(req, ctx) {
    const call = envdCall(ctx);
    checkUser(call.request);
    const name = req.signal === Signal.SIGKILL ? 'KILL' : req.signal === Signal.SIGTERM ? 'TERM' : undefined;
    if (!name) throw new InvalidRequestError('signal must be SIGNAL_SIGKILL or SIGNAL_SIGTERM');
    await select((await call.processes()).table, req.process).signal(name);
    return {};
  },

  async update(req, ctx) {
    const call = envdCall(ctx);
    checkUser(call.request);
    if (req.pty === undefined) throw new E2bUnsupportedError('Update: only a pty size can be changed');
    const size = ptySize(req.pty);
    select((await call.processes()).table, req.process).resize(size.cols, size.rows);
    return {};
  },
};
