import { readFile } from 'node:fs/promises';
import net from 'node:net';

/** What came back on a raw socket: the status, the body as text, and when it closed. */
export interface RawResponse {
  status: number | undefined;
  body: string;
  bytes: number;
  closedAfterMs: number;
  error?: string;
}

/**
 * One HTTP request on a raw socket to 127.0.0.1:port, written by `write`, which may trickle
 * or flood; reads until the server closes. For what fetch cannot do: send headers byte by
 * byte, or keep sending a body after the server has answered.
 */
export function rawRequest(port: number, write: (socket: net.Socket, answered: () => boolean) => Promise<void>, timeoutMs = 30_000): Promise<RawResponse> {
  return new Promise((resolve) => {
    const started = Date.now();
    const socket = net.connect(port, '127.0.0.1');
    const chunks: Buffer[] = [];
    let error: string | undefined;
    let done = false;
    const finish = () => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      const all = Buffer.concat(chunks);
      const text = all.toString('latin1');
      const status = /^HTTP\/1\.1 (\d{3})/.exec(text)?.[1];
      const split = text.indexOf('\r\n\r\n');
      resolve({
        status: status === undefined ? undefined : Number(status),
        body: split >= 0 ? all.subarray(split + 4).toString('utf8') : '',
        bytes: all.length,
        closedAfterMs: Date.now() - started,
        ...(error ? { error } : {}),
      });
    };
    const timer = setTimeout(() => {
      error = 'client gave up';
      socket.destroy();
    }, timeoutMs);
    socket.on('data', (chunk: Buffer) => chunks.push(chunk));
    socket.on('error', (err) => (error = err.message));
    socket.on('close', finish);
    socket.once('connect', () => {
      write(socket, () => chunks.length > 0 || done).catch((err: unknown) => (error = (err as Error).message));
    });
  });
}

/** Writes `data`, waiting for the socket to drain; false once the socket is unusable. */
export async function writeAll(socket: net.Socket, data: string | Buffer): Promise<boolean> {
  if (socket.destroyed || !socket.writable) return false;
  if (socket.write(data)) return true;
  return new Promise((resolve) => {
    const onDrain = () => {
      socket.off('close', onClose);
      resolve(true);
    };
    const onClose = () => {
      socket.off('drain', onDrain);
      resolve(false);
    };
    socket.once('drain', onDrain);
    socket.once('close', onClose);
  });
}

/** A process's resident memory now and at its peak (VmHWM), in MiB. */
export async function memoryOf(pid: number): Promise<{ rssMiB: number; peakMiB: number }> {
  const status = await readFile(`/proc/${pid}/status`, 'utf8');
  const kib = (field: string) => Number(new RegExp(`^${field}:\\s+(\\d+) kB`, 'm').exec(status)?.[1] ?? NaN);
  return { rssMiB: Math.round(kib('VmRSS') / 1024), peakMiB: Math.round(kib('VmHWM') / 1024) };
}
