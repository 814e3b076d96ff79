import { readFileSync } from 'node:fs';
import { rename, rm, writeFile } from 'node:fs/promises';
import net from 'node:net';
import os from 'node:os';
import { processStartTime } from './host/process-watch.js';

/**
 * One orchestrator per resource prefix per host. Two orchestrators with one prefix would each
 * take the other's netns, veths, containers and policy table for leftovers of a crash and
 * reclaim them at start-up; so the second one must refuse to start, before it touches anything.
 *
 * The lock itself is an abstract Unix socket named after the prefix: binding it is atomic,
 * and the kernel releases it the moment its process dies, however it dies (SIGKILL, OOM), so
 * a lock is never stale and never needs taking over. Next to it, a file under /run says who
 * holds it (pid, start time, port, state dir, host), for the refusal message and for people;
 * the file is also checked on its own, so that a holder in another network namespace (where
 * the abstract socket is not visible) is still found while its pid lives with the same
 * start time. A file whose pid is dead or was reused is stale and simply overwritten.
 */
export interface LockHolder {
  pid: number;
  /** The holder's start time (/proc/<pid>/stat field 22), so a reused pid is not taken for it. */
  startTime: string;
  host: string;
  port: number;
  stateDir: string;
  hostname: string;
  startedAt: string;
}

export class OrchestratorLockedError extends Error {
  constructor(
    readonly prefix: string,
    readonly holder: LockHolder | undefined,
  ) {
    const who = holder
      ? `pid ${holder.pid}, listening on ${holder.host}:${holder.port}, state dir ${holder.stateDir}, started ${holder.startedAt}`
      : 'its pid file could not be read';
    super(
      `another orchestrator with the resource prefix "${prefix}" is running on this host (${who}). ` +
        `Two orchestrators with one prefix would reclaim each other's sandboxes, so this one does not start. ` +
        `Stop that one first (kill ${holder?.pid ?? '<pid>'}), or give this one a prefix and subnet of its own, ` +
        `e.g. SBX_RESOURCE_PREFIX=sbz- SBX_SUBNET=10.242.0.0/16`,
    );
    this.name = 'OrchestratorLockedError';
  }
}

export interface OrchestratorLock {
  readonly path: string;
  /** Records where the server really listens (port 0 is chosen at listen time). */
  update(listening: { host: string; port: number }): Promise<void>;
  /** Gives the lock up (idempotent): the socket closes, the file goes. */
  release(): Promise<void>;
}

/** Where the holder of a prefix's lock describes itself. */
export function lockFilePath(prefix: string): string {
  return `/run/${prefix}orchestrator.lock`;
}

/**
 * Takes the host-wide lock of `prefix`, or throws an OrchestratorLockedError naming the
 * orchestrator that holds it.
 */
export async function takeOrchestratorLock(prefix: string, self: { host: string; port: number; stateDir: string }): Promise<OrchestratorLock> {
  const file = lockFilePath(prefix);
  const fromFile = readHolder(file);
  if (fromFile && fromFile.pid !== process.pid && processStartTime(fromFile.pid) === fromFile.startTime) {
    throw new OrchestratorLockedError(prefix, fromFile);
  }
  const server = net.createServer((socket) => socket.destroy());
  try {
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(`\0${prefix}orchestrator`, () => resolve());
    });
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'EADDRINUSE') throw new OrchestratorLockedError(prefix, readHolder(file));
    throw err;
  }
  // The lock must never keep the process alive by itself.
  server.unref();
  const holder: LockHolder = {
    pid: process.pid,
    startTime: processStartTime(process.pid) ?? '',
    host: self.host,
    port: self.port,
    stateDir: self.stateDir,
    hostname: os.hostname(),
    startedAt: new Date().toISOString(),
  };
  const write = async () => {
    // Written aside and renamed, so a reader never sees half a file.
    const tmp = `${file}.${process.pid}.tmp`;
    await writeFile(tmp, `${JSON.stringify(holder)}\n`, { mode: 0o644 });
    await rename(tmp, file);
  };
  try {
    await write();
  } catch (err) {
    server.close();
    throw err;
  }
  let released: Promise<void> | undefined;
  return {
    path: file,
    async update(listening) {
      holder.host = listening.host;
      holder.port = listening.port;
      await write();
    },
    release() {
      released ??= (async () => {
        // The file first: it must not outlive the socket and name a holder that has gone.
        if (readHolder(file)?.pid === process.pid) await rm(file, { force: true });
        await new Promise<void>((resolve) => server.close(() => resolve()));
      })();
      return released;
    },
  };
}

function readHolder(file: string): LockHolder | undefined {
  try {
    const parsed = JSON.parse(readFileSync(file, 'utf8')) as Partial<LockHolder>;
    if (typeof parsed.pid !== 'number' || typeof parsed.startTime !== 'string') return undefined;
    return parsed as LockHolder;
  } catch {
    return undefined;
  }
}
