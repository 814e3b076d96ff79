import { closeSync, constants, openSync } from 'node:fs';
import { rm, stat } from 'node:fs/promises';
import net from 'node:net';
import path from 'node:path';
import { pipeline } from 'node:stream/promises';
import { setTimeout as sleep } from 'node:timers/promises';
import { run } from '../util/exec.js';
import { CappedLogWriter } from './console-log.js';

/**
 * A sandbox's console (runc's and the container's stdout and stderr, a VM's serial console
 * and its VMM's own messages) reaches the host through a named pipe, <sessionDir>/console.fifo,
 * which the orchestrator reads and writes to a size-capped console.log (CappedLogWriter).
 * The guest is never handed a file it could grow.
 *
 * A named pipe rather than an anonymous one, for adoption: the container or VMM holds the
 * write end for its whole life, and an orchestrator restarted after a crash opens the same
 * FIFO again by its path and goes on reading it (reattachConsole). While no orchestrator
 * runs, the FIFO has no reader: what the guest writes meanwhile is dropped (its write fails
 * with EPIPE; QEMU and Firecracker ignore SIGPIPE, and the init of a container cannot be
 * killed by it). Dropped is bounded; nothing is buffered or blocks for long.
 *
 * The orchestrator opens its end read-write: a FIFO with a writer never reports end-of-file,
 * so the read end stays open across the moment between one writer (runc) and the next (the
 * container it leaves behind), and reads are non-blocking on the event loop (a net.Socket).
 */
export interface ConsolePipe {
  /** The capped log the console is written to. */
  readonly logPath: string;
  /**
   * A fresh write end for a child's stdout/stderr. The caller closes its own copy (closeSync)
   * once the child has been spawned with it.
   */
  openWriter(): number;
  /** Waits (at most `maxMs`) until no more output is arriving: for an error message read just after. */
  quiet(maxMs?: number): Promise<void>;
  /** Stops reading and closes the log (idempotent). The FIFO goes with the session dir. */
  close(): Promise<void>;
}

export function consoleFifoPath(sessionDir: string): string {
  return path.join(sessionDir, 'console.fifo');
}

export function consoleLogPathOf(sessionDir: string): string {
  return path.join(sessionDir, 'console.log');
}

/** Makes the session's console FIFO and starts copying it into the capped log. */
export async function openConsole(sessionDir: string, maxBytes: number): Promise<ConsolePipe> {
  const fifo = consoleFifoPath(sessionDir);
  await rm(fifo, { force: true });
  await run(['mkfifo', '-m', '0600', fifo]);
  return attach(fifo, consoleLogPathOf(sessionDir), maxBytes);
}

/**
 * The console of a sandbox an earlier run started (adoption): its FIFO read again, or
 * undefined when there is none (then its output has no reader and is dropped).
 */
export async function reattachConsole(sessionDir: string, maxBytes: number): Promise<ConsolePipe | undefined> {
  const fifo = consoleFifoPath(sessionDir);
  const info = await stat(fifo).catch(() => undefined);
  if (!info?.isFIFO()) return undefined;
  return attach(fifo, consoleLogPathOf(sessionDir), maxBytes);
}

function attach(fifo: string, logPath: string, maxBytes: number): ConsolePipe {
  const fd = openSync(fifo, constants.O_RDWR | constants.O_NONBLOCK);
  const reader = new net.Socket({ fd, readable: true, writable: false });
  const writer = new CappedLogWriter(logPath, maxBytes);
  let lastData = Date.now();
  reader.on('data', () => (lastData = Date.now()));
  // An error on either side ends the copy (and closes both); the sandbox is not affected.
  const copying = pipeline(reader, writer).catch(() => undefined);
  let closed: Promise<void> | undefined;
  return {
    logPath,
    openWriter() {
      // Never blocks: this process holds a read end already.
      return openSync(fifo, constants.O_WRONLY);
    },
    async quiet(maxMs = 1_000) {
      const deadline = Date.now() + maxMs;
      while (Date.now() < deadline && Date.now() - lastData < 100 && !reader.destroyed) await sleep(25);
      // What was read has been handed to the writer; let it reach the file.
      if (writer.writableLength > 0 && !writer.destroyed) {
        await Promise.race([new Promise((resolve) => writer.once('drain', resolve)), sleep(Math.max(1, deadline - Date.now()))]);
      }
    },
    close() {
      closed ??= (async () => {
        reader.destroy();
        await copying;
        writer.destroy();
      })();
      return closed;
    },
  };
}

/** Spawns need an fd they can dup; this runs `use` with one and closes it after. */
export function withWriter<T>(consolePipe: ConsolePipe, use: (fd: number) => T): T {
  const fd = consolePipe.openWriter();
  try {
    return use(fd);
  } finally {
    closeSync(fd);
  }
}
