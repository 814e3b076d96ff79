import { commandLine } from '../transport/quote.js';
import type { GuestChannel } from '../transport/index.js';

/** How long inotifywait may take to say its watch is set before the watch polls instead. */
const SETUP_TIMEOUT_MS = 5_000;
/** What of inotifywait's standard error is read (its "Watches established." line). */
const MAX_STDERR_BYTES = 4096;

/** Stops a trigger: its channel closed, nothing more called. */
export interface WatchTrigger {
  stop(): void;
}

/**
 * Calls `onEvent` whenever the guest's kernel reports a change to `dir`'s entries, through
 * `inotifywait -m` on a channel of the session's connection (the images carry inotify-tools).
 * Its output is one fixed byte per event (`--format x`): nothing the guest prints is parsed
 * or kept, whatever the names of its files, and a flood of events costs a flood of calls to
 * `onEvent` only (the watch coalesces them). The argv is quoted as data (quote.ts).
 *
 * Resolves once the watch is set; undefined when it cannot be (no inotifywait in the image,
 * too many watches, a channel refused), and the caller polls instead.
 */
export async function inotifyTrigger(
  spawn: (command: string) => Promise<GuestChannel>,
  dir: string,
  onEvent: () => void,
  onEnd: () => void,
): Promise<WatchTrigger | undefined> {
  const command = `exec ${commandLine(['inotifywait', '-m', '-e', 'create,delete,modify,attrib,move', '--format', 'x', '--', dir])}`;
  let channel: GuestChannel;
  try {
    channel = await spawn(command);
  } catch {
    return undefined;
  }
  channel.on('error', () => undefined);
  channel.stderr.on('error', () => undefined);
  const ready = await new Promise<boolean>((resolve) => {
    let seen = '';
    const timer = setTimeout(() => resolve(false), SETUP_TIMEOUT_MS);
    const done = (ok: boolean) => {
      clearTimeout(timer);
      channel.stderr.removeAllListeners('data');
      channel.stderr.resume();
      resolve(ok);
    };
    channel.stderr.on('data', (chunk: Buffer) => {
      if (seen.length < MAX_STDERR_BYTES) seen += chunk.toString('latin1').slice(0, MAX_STDERR_BYTES - seen.length);
      if (seen.includes('Watches established')) done(true);
      else if (seen.length >= MAX_STDERR_BYTES) done(false);
    });
    channel.once('close', () => done(false));
  });
  if (!ready) {
    channel.close();
    return undefined;
  }
  let stopped = false;
  channel.on('data', () => {
    if (!stopped) onEvent();
  });
  channel.once('close', () => {
    if (!stopped) onEnd();
  });
  return {
    stop: () => {
      stopped = true;
      channel.close();
    },
  };
}
