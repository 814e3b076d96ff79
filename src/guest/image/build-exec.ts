import { spawn } from 'node:child_process';
import { inheritedEnv } from '../../util/inherited-env.js';

// How the image build runs its commands: argv arrays (never a shell string), every line of
// output passed on, and an error that quotes the last lines.

export interface ExecOptions {
  stdin?: Buffer;
  /** Every line of stdout and stderr. */
  onLine?: (line: string) => void;
  /** Aborting kills the command (SIGTERM): a build interrupted by Ctrl-C stops its child. */
  signal?: AbortSignal;
  /** How many of the last lines the error quotes (default 3). */
  tailLines?: number;
}

export class CommandError extends Error {
  constructor(
    message: string,
    readonly exitCode: number | undefined,
    readonly lastLines: string[],
  ) {
    super(message);
  }
}

const HOW_TO_INSTALL: Record<string, string> = {
  debootstrap: 'apt-get install debootstrap',
  'mkfs.ext4': 'apt-get install e2fsprogs',
};

/** Runs argv (no shell) and resolves on exit 0; lines of output go to onLine. */
export function execLogged(command: string, args: string[], options: ExecOptions): Promise<void> {
  return new Promise((resolve, reject) => {
    const child = spawn(command, args, {
      signal: options.signal,
      stdio: [options.stdin ? 'pipe' : 'ignore', 'pipe', 'pipe'],
      env: inheritedEnv({
        PATH: '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin',
        LC_ALL: 'C',
        DEBIAN_FRONTEND: 'noninteractive',
      }),
    });
    const lastLines: string[] = [];
    const onLine = (line: string) => {
      lastLines.push(line);
      if (lastLines.length > (options.tailLines ?? 3)) lastLines.shift();
      options.onLine?.(line);
    };
    splitLines(child.stdout, onLine);
    splitLines(child.stderr, onLine);
    if (options.stdin && child.stdin) child.stdin.end(options.stdin);
    child.on('error', (error) => {
      const hint = HOW_TO_INSTALL[command];
      reject(isErrnoCode(error, 'ENOENT') ? new CommandError(`${command} not found${hint ? `: ${hint}` : ''}`, undefined, []) : error);
    });
    child.on('close', (code, signal) => {
      if (code === 0) return resolve();
      const status = signal ? `signal ${signal}` : `exit ${code}`;
      const detail = lastLines.length ? `: ${lastLines.join(' | ')}` : '';
      reject(new CommandError(`${command} ${args.join(' ')} failed (${status})${detail}`, code ?? undefined, [...lastLines]));
    });
  });
}

/** A build's output line longer than this is cut: a step's code may print without end and never a newline. */
export const MAX_LINE_CHARS = 4096;

function splitLines(stream: NodeJS.ReadableStream | null, onLine: (line: string) => void): void {
  if (!stream) return;
  let pending = '';
  let cut = false;
  stream.setEncoding('utf8');
  stream.on('data', (chunk: string) => {
    for (let start = 0; start <= chunk.length;) {
      const newline = chunk.indexOf('\n', start);
      const piece = chunk.slice(start, newline < 0 ? chunk.length : newline);
      // Kept only up to the cap, checked before it is appended; the rest of the line is dropped.
      if (!cut) {
        const room = MAX_LINE_CHARS - pending.length;
        if (piece.length > room) cut = true;
        pending += piece.slice(0, room);
      }
      if (newline < 0) return;
      onLine(cut ? `${pending} [cut at ${MAX_LINE_CHARS} characters]` : pending.replace(/\r$/, ''));
      pending = '';
      cut = false;
      start = newline + 1;
    }
  });
  stream.on('end', () => {
    if (pending) onLine(cut ? `${pending} [cut at ${MAX_LINE_CHARS} characters]` : pending);
  });
}

export function isErrnoCode(error: unknown, code: string): boolean {
  return error instanceof Error && (error as NodeJS.ErrnoException).code === code;
}
