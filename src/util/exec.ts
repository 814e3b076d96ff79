import { spawn, type ChildProcess, type SpawnOptions } from 'node:child_process';

/** A host command failed: carries the argv and what it printed, for an error a user can act on. */
export class CommandError extends Error {
  constructor(
    readonly argv: readonly string[],
    readonly exitCode: number | null,
    readonly stderr: string,
    readonly signal: NodeJS.Signals | null = null,
  ) {
    const how = signal ? `killed by ${signal}` : `exit ${exitCode}`;
    super(`${argv.join(' ')} failed (${how})${stderr ? `: ${stderr.trim().slice(-2000)}` : ''}`);
    this.name = 'CommandError';
  }
}

export interface RunOptions {
  /** Kill the command after this many milliseconds. */
  timeoutMs?: number;
  input?: string | Buffer;
  /** Resolve instead of throwing on a non-zero exit. */
  allowFailure?: boolean;
  env?: NodeJS.ProcessEnv;
  cwd?: string;
  /**
   * Started in a process group of its own, and the timeout kills the whole group: what the
   * command started and left running (runc's criu, which a killed runc leaves holding its
   * tracees) ends with it.
   */
  killGroup?: boolean;
}

export interface RunResult {
  stdout: string;
  stderr: string;
  exitCode: number | null;
}

/**
 * Runs a host command from an argument vector: no shell is ever involved, so no argument
 * can be interpreted as shell syntax.
 */
export function run(argv: readonly string[], opts: RunOptions = {}): Promise<RunResult> {
  const [file, ...args] = argv;
  if (!file) throw new Error('run: empty argv');
  const spawnOpts: SpawnOptions = {
    stdio: [opts.input === undefined ? 'ignore' : 'pipe', 'pipe', 'pipe'],
    // Unset: the child inherits this process's environment (spawn's own default).
    env: opts.env,
    cwd: opts.cwd,
    ...(opts.killGroup ? { detached: true } : { timeout: opts.timeoutMs, killSignal: 'SIGKILL' }),
  };
  return new Promise((resolve, reject) => {
    const child = spawn(file, args, spawnOpts);
    if (opts.killGroup && opts.timeoutMs !== undefined) killGroupAfter(child, opts.timeoutMs);
    const out: Buffer[] = [];
    const err: Buffer[] = [];
    child.stdout?.on('data', (d: Buffer) => out.push(d));
    child.stderr?.on('data', (d: Buffer) => err.push(d));
    child.on('error', (e) => reject(new CommandError(argv, null, e.message)));
    child.on('close', (code, signal) => {
      const result = {
        stdout: Buffer.concat(out).toString('utf8'),
        stderr: Buffer.concat(err).toString('utf8'),
        exitCode: code,
      };
      if (code === 0 || opts.allowFailure) resolve(result);
      else reject(new CommandError(argv, code, result.stderr || result.stdout, signal));
    });
    if (opts.input !== undefined) child.stdin?.end(opts.input);
  });
}

/**
 * Kills the process group of `child` (spawned `detached`: it leads a group of its own) with
 * SIGKILL once `ms` have passed, unless it has exited by then; its group's other processes
 * go with it whenever it is killed.
 */
export function killGroupAfter(child: ChildProcess, ms: number): void {
  const timer = setTimeout(() => {
    if (child.pid === undefined) return;
    try {
      process.kill(-child.pid, 'SIGKILL');
    } catch {
      // The group is gone already.
    }
  }, ms);
  child.once('exit', () => clearTimeout(timer));
  child.once('error', () => clearTimeout(timer));
}
