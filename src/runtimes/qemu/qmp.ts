import net from 'node:net';
import path from 'node:path';

/**
 * One QMP exchange with a VM's QEMU over its monitor socket (<sessionDir>/qmp.sock, made by
 * QEMU as root before it drops to the VM's user, so only root reaches it): connect, read the
 * greeting, leave capabilities negotiation, run the commands in order, close. A connection
 * per call keeps nothing open that a restarted orchestrator would have to find again, and
 * QEMU serves one monitor client at a time anyway.
 *
 * What QEMU sends is bounded (MAX_REPLY_BYTES): the VM's owner cannot reach this socket, but
 * a QEMU misbehaving must not grow the orchestrator's memory.
 */
const MAX_REPLY_BYTES = 1 << 20;
const DEFAULT_TIMEOUT_MS = 10_000;

export interface QmpCommand {
  execute: string;
  arguments?: Record<string, unknown>;
}

export class QmpError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'QmpError';
  }
}

/** Runs `commands` in order; returns each one's `return` value. */
export async function qmp(socketPath: string, commands: readonly QmpCommand[], timeoutMs = DEFAULT_TIMEOUT_MS): Promise<unknown[]> {
  const socket = net.createConnection(socketPath);
  const results: unknown[] = [];
  let buffered = '';
  let waiting: ((line: Record<string, unknown>) => void) | undefined;
  let failed: ((err: Error) => void) | undefined;
  const lines: Array<Record<string, unknown>> = [];
  let error: Error | undefined;
  const fail = (err: Error) => {
    error ??= err;
    failed?.(err);
  };
  socket.setEncoding('utf8');
  socket.on('data', (chunk: string) => {
    buffered += chunk;
    if (buffered.length > MAX_REPLY_BYTES) return fail(new QmpError(`QMP reply over ${MAX_REPLY_BYTES} bytes`));
    for (let nl = buffered.indexOf('\n'); nl >= 0; nl = buffered.indexOf('\n')) {
      const text = buffered.slice(0, nl).trim();
      buffered = buffered.slice(nl + 1);
      if (!text) continue;
      let line: Record<string, unknown>;
      try {
        line = JSON.parse(text) as Record<string, unknown>;
      } catch {
        return fail(new QmpError(`QMP sent a line that is not JSON: ${text.slice(0, 200)}`));
      }
      // Events (STOP, RESUME, ...) come between replies: not what a command waits for.
      if ('event' in line) continue;
      if (waiting) {
        const w = waiting;
        waiting = undefined;
        w(line);
      } else lines.push(line);
    }
  });
  const next = () =>
    new Promise<Record<string, unknown>>((resolve, reject) => {
      failed = reject;
      if (error) return reject(error);
      const queued = lines.shift();
      if (queued) resolve(queued);
      else waiting = resolve;
    });
  const timer = setTimeout(() => fail(new QmpError(`QMP at ${socketPath} did not answer within ${timeoutMs} ms`)), timeoutMs);
  socket.on('error', (err) => fail(new QmpError(`QMP at ${socketPath}: ${err.message}`)));
  socket.on('close', () => fail(new QmpError(`QMP at ${socketPath} closed the connection`)));
  try {
    const greeting = await next();
    if (!('QMP' in greeting)) throw new QmpError('QMP did not greet');
    for (const command of [{ execute: 'qmp_capabilities' }, ...commands]) {
      socket.write(`${JSON.stringify(command)}\n`);
      const reply = await next();
      if ('error' in reply) {
        const error = reply.error as { class?: string; desc?: string };
        throw new QmpError(`QMP ${command.execute}: ${error.desc ?? error.class ?? 'failed'}`);
      }
      if (command.execute !== 'qmp_capabilities') results.push(reply.return);
    }
    return results;
  } finally {
    clearTimeout(timer);
    failed = undefined;
    socket.destroy();
  }
}

/** The VM's run state as QMP's query-status says it (`running`, `paused`, `postmigrate`, ...). */
export async function qmpStatus(socketPath: string): Promise<string> {
  const [status] = await qmp(socketPath, [{ execute: 'query-status' }]);
  const state = (status as { status?: unknown } | undefined)?.status;
  return typeof state === 'string' ? state : 'unknown';
}

/** The VM's QMP monitor socket (qemu-command.ts). */
export function qmpSocketOf(sessionDir: string): string {
  return path.join(sessionDir, 'qmp.sock');
}

/** How a migration stands (QMP query-migrate): `active`, `completed`, `failed`, ... and why it failed. */
export async function qmpMigration(socketPath: string): Promise<{ status: string; error?: string }> {
  const [info] = await qmp(socketPath, [{ execute: 'query-migrate' }]);
  const { status, 'error-desc': error } = (info ?? {}) as { status?: unknown; 'error-desc'?: unknown };
  return { status: typeof status === 'string' ? status : 'none', error: typeof error === 'string' ? error : undefined };
}
