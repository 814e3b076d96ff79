import { Command } from 'commander';
import type { SandboxClient } from '../client/index.js';

/** Exit statuses for a process ended by a signal, as a shell reports them (128 + the number). */
const SIGNAL_NUMBERS: Readonly<Record<string, number>> = { HUP: 1, INT: 2, QUIT: 3, KILL: 9, USR1: 10, SEGV: 11, USR2: 12, PIPE: 13, ALRM: 14, TERM: 15 };

/**
 * `sbx exec <id> [--cwd dir] [-e NAME=value] [--shell] [--stdin] -- cmd args...`: runs a command
 * in the sandbox (each argument passed as one argument; --shell runs the words joined as one
 * `bash -lc` command), streams its stdout and stderr to ours, and exits with its exit code.
 */
export function execCommand(client: () => SandboxClient): Command {
  return new Command('exec')
    .description('run a command in a sandbox, stream its output, exit with its code (sbx exec <id> -- ls -la /tmp)')
    .argument('<id>', 'session id')
    .argument('<command...>', 'the program and its arguments (after --)')
    .option('--cwd <dir>', "working directory in the sandbox (default the user's home)")
    .option('-e, --env <NAME=value>', 'an environment variable (repeatable)', (value: string, all: string[] = []) => [...all, value])
    .option('--shell', 'run the words as one shell command (bash -lc) instead of an argument vector')
    .option('--stdin', 'send our standard input to the command')
    .option('--timeout <seconds>', 'kill the command after this long', (v: string) => Number.parseInt(v, 10))
    .action(async (id: string, words: string[], opts: { cwd?: string; env?: string[]; shell?: boolean; stdin?: boolean; timeout?: number }) => {
      const env: Record<string, string> = {};
      for (const pair of opts.env ?? []) {
        const at = pair.indexOf('=');
        if (at <= 0) throw new Error(`--env takes NAME=value, got "${pair}"`);
        env[pair.slice(0, at)] = pair.slice(at + 1);
      }
      const sandbox = await client().connect(id);
      // Started and followed in one request: the first byte a round trip sooner.
      const events = sandbox.processes.run({
        ...(opts.shell ? { cmd: words.join(' ') } : { argv: words }),
        ...(opts.cwd ? { cwd: opts.cwd } : {}),
        ...(Object.keys(env).length > 0 ? { env } : {}),
        ...(opts.stdin ? { stdin: true } : {}),
        ...(opts.timeout ? { timeoutSeconds: opts.timeout } : {}),
      });
      for await (const event of events) {
        if (event.type === 'start') {
          if (opts.stdin) void forwardStdin(await sandbox.processes.connect(event.process.pid));
        } else if (event.type === 'stdout') await write(process.stdout, event.data);
        else if (event.type === 'stderr') await write(process.stderr, event.data);
        else if (event.type === 'dropped') process.stderr.write(`sbx: ${event.bytes} bytes of output were dropped before they could be read\n`);
        else if (event.type === 'exit') {
          // Now, not when the event loop empties: the client's keep-alive sockets would hold it
          // (stdout and stderr are synchronous for files and pipes on Linux: nothing is lost).
          process.exit(event.exitCode ?? (event.signal ? 128 + (SIGNAL_NUMBERS[event.signal] ?? 0) : 1));
        }
      }
    });
}

/** Writes with back-pressure: a slow reader of ours slows the stream (and so the process). */
function write(stream: NodeJS.WriteStream, data: Buffer): Promise<void> {
  return new Promise((resolve) => (stream.write(data) ? resolve() : stream.once('drain', () => resolve())));
}

async function forwardStdin(proc: { stdin(data: Buffer, options?: { eof?: boolean }): Promise<void> }): Promise<void> {
  for await (const chunk of process.stdin) await proc.stdin(chunk as Buffer);
  await proc.stdin(Buffer.alloc(0), { eof: true });
}
