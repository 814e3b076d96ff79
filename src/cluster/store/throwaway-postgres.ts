/**
 * A PostgreSQL server of its own, for the tests and the bench (never for a real cluster):
 * Debian's PostgreSQL 15 binaries, a fresh data directory in a temporary folder, trust
 * authentication for the local user `sbx`, listening on 127.0.0.1 at a free port and on a
 * Unix socket in that folder. Never the package's own cluster on 5432. As root, the server
 * runs as the `postgres` OS user (PostgreSQL refuses root): the folder is chowned to it and
 * the processes are spawned with its uid and gid (what runuser does, without a PAM session
 * in between, so the process group holds only the server and its backends).
 *
 * kill() (SIGKILL to the postmaster and every backend: a crash, a database gone) and start()
 * again on the same data directory and port, or pause()/resume() (SIGSTOP/SIGCONT to all of
 * them: a database that stops answering without closing anything). stop() ends it and
 * removes the folder; so does the process's exit, should a caller forget.
 */
import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { chownSync, closeSync, mkdtempSync, openSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { promisify } from 'node:util';
import pg from 'pg';
import { inheritedEnv } from '../../util/inherited-env.js';

export const DEFAULT_POSTGRES_BIN_DIR = '/usr/lib/postgresql/15/bin';

export interface ThrowawayPostgresOptions {
  /** Where initdb and postgres are (Debian's postgresql-15 by default). */
  readonly binDir?: string;
  /**
   * fsync as a real deployment has it (the bench). Off by default: the tests need a
   * database that survives its process being killed, not a power cut, and fsync on a busy
   * shared disk would make their timings the disk's.
   */
  readonly durable?: boolean;
}

export interface ThrowawayPostgres {
  /** postgres://sbx@127.0.0.1:<port>/postgres */
  readonly url: string;
  readonly port: number;
  /** The folder holding data/, the socket and server.log. */
  readonly dir: string;
  /** The server's own log (startup errors, crashes). */
  log(): string;
  /** SIGKILL to the server and all its backends: the database is gone until start(). */
  kill(): Promise<void>;
  /** Starts it again on the same data directory and port (after kill()); waits until it answers. */
  start(): Promise<void>;
  /** SIGSTOP to the server and its backends: connections stay open and nothing answers. */
  pause(): void;
  resume(): void;
  /** CPU time (s) of the server and its backends so far, ended backends included (for the bench). */
  cpuSeconds(): number;
  /** Ends the server and removes its folder. Safe to call twice. */
  stop(): Promise<void>;
}

const execFileAsync = promisify(execFile);

/** The postgres OS user's uid and gid when we are root (PostgreSQL will not run as root). */
async function serverUser(): Promise<{ uid: number; gid: number } | undefined> {
  if (process.getuid?.() !== 0) return undefined;
  const { stdout: uid } = await execFileAsync('id', ['-u', 'postgres']);
  const { stdout: gid } = await execFileAsync('id', ['-g', 'postgres']);
  return { uid: Number(uid.trim()), gid: Number(gid.trim()) };
}

/** The fields after a /proc/<pid>/stat's comm (which may hold spaces and parentheses): [0] is the state. */
function statFields(pid: number | string): string[] {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  return stat.slice(stat.lastIndexOf(')') + 2).split(' ');
}

/** Clock ticks a second of /proc's CPU times (USER_HZ: 100 on every Linux build that matters). */
const TICKS_PER_SECOND = 100;

/** The pids whose parent is `parent`, from /proc. */
function childrenOf(parent: number): number[] {
  const children: number[] = [];
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      if (Number(statFields(entry)[1]) === parent) children.push(Number(entry));
    } catch {
      // ended meanwhile
    }
  }
  return children;
}

async function freePort(): Promise<number> {
  const server = net.createServer();
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const address = server.address();
  server.close();
  if (!address || typeof address === 'string') throw new Error('no TCP port');
  return address.port;
}

export async function startThrowawayPostgres(options: ThrowawayPostgresOptions = {}): Promise<ThrowawayPostgres> {
  const binDir = options.binDir ?? DEFAULT_POSTGRES_BIN_DIR;
  const user = await serverUser();
  const dir = mkdtempSync(path.join(os.tmpdir(), 'sbx-pg-'));
  const dataDir = path.join(dir, 'data');
  const logFile = path.join(dir, 'server.log');
  if (user) chownSync(dir, user.uid, user.gid);
  let child: ChildProcess | undefined;
  let stopped = false;

  // Should the caller never call stop() (a test that threw, a bench that crashed), the
  // server must not outlive this process: killed and removed at exit, synchronously.
  const onExit = (): void => {
    killGroup('SIGKILL');
    rmSync(dir, { recursive: true, force: true });
  };
  process.once('exit', onExit);

  /**
   * `signal` to the postmaster, then to each of its children. Not to a process group: every
   * backend makes itself a group leader (InitPostmasterChild calls setsid), so the
   * postmaster's group holds the postmaster alone. Stopping it first means it forks no new
   * backend meanwhile.
   */
  function killGroup(signal: NodeJS.Signals): void {
    if (child?.pid === undefined || child.exitCode !== null || child.signalCode !== null) return;
    const postmaster = child.pid;
    for (const pid of [postmaster, ...childrenOf(postmaster)]) {
      try {
        process.kill(pid, signal);
      } catch {
        // already gone
      }
    }
  }

  const spawnOptions = { ...(user ? { uid: user.uid, gid: user.gid } : {}), env: inheritedEnv({ LC_ALL: 'C', TZ: 'UTC' }) };
  try {
    await execFileAsync(
      path.join(binDir, 'initdb'),
      ['-D', dataDir, '-U', 'sbx', '-A', 'trust', '-E', 'UTF8', '--locale=C', '--no-sync', '--no-instructions'],
      spawnOptions,
    );
  } catch (error) {
    process.off('exit', onExit);
    rmSync(dir, { recursive: true, force: true });
    throw new Error(`initdb failed (is Debian's postgresql 15 installed in ${binDir}?): ${error instanceof Error ? error.message : String(error)}`);
  }
  const port = await freePort();
  const url = `postgres://sbx@127.0.0.1:${port}/postgres`;
  const settings = [
    `listen_addresses=127.0.0.1`,
    `port=${port}`,
    `unix_socket_directories=${dir}`,
    'max_connections=300',
    // Commits still reach the kernel before they are acknowledged (synchronous_commit stays
    // on): a killed server (kill()) loses nothing; only a power cut would.
    ...(options.durable ? [] : ['fsync=off', 'full_page_writes=off']),
  ];

  async function start(): Promise<void> {
    if (stopped) throw new Error('this PostgreSQL was stopped for good');
    const log = openSync(logFile, 'a');
    try {
      child = spawn(path.join(binDir, 'postgres'), ['-D', dataDir, ...settings.flatMap((setting) => ['-c', setting])], {
        ...spawnOptions,
        detached: true,
        stdio: ['ignore', log, log],
      });
    } finally {
      closeSync(log);
    }
    child.on('error', () => {}); // reported below as "did not start"
    const deadline = Date.now() + 30_000;
    while (Date.now() < deadline) {
      if (child.exitCode !== null || child.signalCode !== null) break;
      const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: 1000 });
      client.on('error', () => {});
      try {
        await client.connect();
        await client.query('SELECT 1');
        await client.end();
        return;
      } catch {
        await client.end().catch(() => {});
        await sleep(50);
      }
    }
    killGroup('SIGKILL');
    throw new Error(`PostgreSQL did not start on port ${port}:\n${readLog()}`);
  }

  function readLog(): string {
    try {
      return readFileSync(logFile, 'utf8');
    } catch {
      return '';
    }
  }

  async function waitExit(ms: number): Promise<boolean> {
    const running = child;
    if (!running || running.exitCode !== null || running.signalCode !== null) return true;
    const exited = once(running, 'exit').then(() => true);
    return Promise.race([exited, sleep(ms, undefined, { ref: false }).then(() => false)]); // unref: a won race must not keep the process alive
  }

  async function kill(): Promise<void> {
    killGroup('SIGCONT'); // a paused group must wake to die
    killGroup('SIGKILL');
    await waitExit(10_000);
  }

  await start();
  return {
    url,
    port,
    dir,
    log: readLog,
    kill,
    start,
    pause: () => killGroup('SIGSTOP'),
    cpuSeconds() {
      if (child?.pid === undefined) return 0;
      // utime, stime of the postmaster and each backend, plus cutime, cstime: its ended children.
      const ticks = (pid: number, fields: number[]): number => {
        try {
          const stat = statFields(pid);
          return fields.reduce((sum, field) => sum + Number(stat[field - 3]), 0);
        } catch {
          return 0;
        }
      };
      const postmaster = child.pid;
      let total = ticks(postmaster, [14, 15, 16, 17]);
      for (const pid of childrenOf(postmaster)) total += ticks(pid, [14, 15]);
      return total / TICKS_PER_SECOND;
    },
    resume: () => killGroup('SIGCONT'),
    async stop() {
      if (stopped) return;
      stopped = true;
      killGroup('SIGCONT');
      // SIGINT to the postmaster: fast shutdown (it ends its backends, waits for no client).
      if (child?.pid !== undefined && child.exitCode === null && child.signalCode === null) process.kill(child.pid, 'SIGINT');
      if (!(await waitExit(10_000))) await kill();
      process.off('exit', onExit);
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
