import type { ClientChannel } from 'ssh2';
import { GuestProtocolError } from '../errors.js';
import type { ExecResult } from './guest-transport.js';
import { SshTimeoutError } from './ssh-errors.js';

/**
 * Every channel handed out carries an error listener from the start, on itself and on its
 * stderr, whatever its owner adds: a write to a channel the guest already closed, or a
 * stream destroyed with an error, must never be an unhandled 'error'. An owner that cares
 * sees the failure as 'close' (a channel always closes after an error).
 */
export function guardChannel(channel: ClientChannel): ClientChannel {
  channel.on('error', () => undefined);
  channel.stderr.on('error', () => undefined);
  channel.once('exit', (code: unknown, signal: unknown) => {
    EXITS.set(channel, { code: typeof code === 'number' ? code : null, signal: typeof signal === 'string' ? signal : undefined });
  });
  return channel;
}

/** Channels' exit statuses, kept from the moment they came. */
const EXITS = new WeakMap<object, { code: number | null; signal: string | undefined }>();

/**
 * The exit status of a channel handed out, if it came. ssh2 parses every packet of a read in
 * one go, so a command that ends at once can report its exit before the promise that hands
 * the channel over resumes its owner: an 'exit' listener added then would never hear it.
 */
export function exitOf(channel: object): { code: number | null; signal: string | undefined } | undefined {
  return EXITS.get(channel);
}

export function collect(
  channel: ClientChannel,
  stdin: string | Buffer | undefined,
  timeoutMs: number,
  maxOutput: number,
  command: string,
): Promise<ExecResult> {
  return new Promise((resolve, reject) => {
    const stdout: Buffer[] = [];
    const stderr: Buffer[] = [];
    let size = 0;
    let exitCode: number | null = null;
    let signal: string | undefined;
    let failed: Error | undefined;
    const abort = (err: Error) => {
      if (failed) return;
      failed = err;
      channel.close();
    };
    const timer = setTimeout(() => abort(new SshTimeoutError(`guest command "${command.slice(0, 80)}"`, timeoutMs)), timeoutMs);
    const take = (into: Buffer[]) => (chunk: Buffer) => {
      size += chunk.length;
      if (size > maxOutput) {
        return abort(new GuestProtocolError('exec', 'output_overrun', `a command in the guest printed more than ${maxOutput} bytes`));
      }
      into.push(chunk);
    };
    // After an error the channel closes: that is where the command fails.
    channel.on('error', abort);
    channel.on('data', take(stdout));
    channel.stderr.on('data', take(stderr));
    channel.on('exit', (code: number | null, sig?: string) => {
      exitCode = code;
      signal = sig ?? undefined;
    });
    channel.on('close', () => {
      clearTimeout(timer);
      if (failed) return reject(failed);
      resolve({ stdout: Buffer.concat(stdout), stderr: Buffer.concat(stderr), exitCode, signal });
    });
    if (stdin !== undefined) channel.end(stdin);
    else channel.end();
  });
}
