import { Writable } from 'node:stream';
import { constants } from 'node:fs';
import { mkdir, open, readdir, rename, rm, stat, type FileHandle } from 'node:fs/promises';
import path from 'node:path';

/**
 * A guest's console is written by the guest: whatever it prints must cost the host a bounded
 * amount of disk, and reading it back (for an error message) a bounded amount of memory.
 */
export interface ConsoleLogLimits {
  /** Bytes one session's console log may take on disk (SBX_CONSOLE_LOG_MAX_BYTES, default 4 MiB). */
  maxBytes: number;
  /** Failed sessions' console logs kept in <stateDir>/logs, at most (SBX_KEPT_LOGS, default 100)... */
  keptMaxCount: number;
  /** ... and at most this many bytes in all (SBX_KEPT_LOGS_MAX_BYTES, default 64 MiB). */
  keptMaxBytes: number;
}

export const DEFAULT_CONSOLE_LOG_LIMITS: ConsoleLogLimits = {
  maxBytes: 4 * 1024 * 1024,
  keptMaxCount: 100,
  keptMaxBytes: 64 * 1024 * 1024,
};

/** The most a tail read takes from the end of a log, whatever the number of lines asked. */
const TAIL_MAX_BYTES = 16 * 1024;
/** A kept log is the newest part of the console, at most this big. */
const KEPT_LOG_MAX_BYTES = 1024 * 1024;

/** The directory for kept console logs: <stateDir>/logs. */
export function logsDirOf(stateDir: string): string {
  return path.join(stateDir, 'logs');
}

/** The older half of a console log, once the current one has filled its half of the cap. */
export function previousSegmentOf(consoleLogPath: string): string {
  return `${consoleLogPath}.1`;
}

/**
 * Writes a console stream to `<logPath>` capped at `maxBytes` on disk in all: the log is kept
 * in two halves, and when the current one (`console.log`) reaches half the cap it becomes
 * the previous one (`console.log.1`, replacing the one before). So the newest output is
 * always there (what a crash or a failed boot explains itself with), and the two files never
 * hold more than the cap. A Writable: piped into, it pushes back on its source while the disk
 * catches up, so no more than a chunk is ever held in memory.
 */
export class CappedLogWriter extends Writable {
  private handle: FileHandle | undefined;
  private size = 0;
  private readonly segmentBytes: number;

  constructor(
    readonly logPath: string,
    maxBytes: number,
  ) {
    super({ highWaterMark: 64 * 1024 });
    this.segmentBytes = Math.max(1, Math.floor(maxBytes / 2));
  }

  override _construct(callback: (error?: Error | null) => void): void {
    this.openCurrent().then(() => callback(), callback);
  }

  override _write(chunk: Buffer, _encoding: BufferEncoding, callback: (error?: Error | null) => void): void {
    this.append(chunk).then(() => callback(), callback);
  }

  /** Chunks that queued up while a write was on disk go in one write (a guest printing line by line). */
  override _writev(chunks: Array<{ chunk: Buffer }>, callback: (error?: Error | null) => void): void {
    this.append(Buffer.concat(chunks.map((c) => c.chunk))).then(() => callback(), callback);
  }

  override _destroy(error: Error | null, callback: (error?: Error | null) => void): void {
    const handle = this.handle;
    this.handle = undefined;
    (handle ? handle.close() : Promise.resolve()).then(
      () => callback(error),
      () => callback(error),
    );
  }

  private async openCurrent(): Promise<void> {
    // Appending to what is there (an adopted sandbox's log of the run before) and counting it.
    this.handle = await open(this.logPath, constants.O_WRONLY | constants.O_CREAT | constants.O_APPEND, 0o600);
    this.size = (await this.handle.stat()).size;
  }

  private async append(chunk: Buffer): Promise<void> {
    let rest = chunk;
    while (rest.length > 0) {
      if (this.size >= this.segmentBytes) await this.rotate();
      const room = this.segmentBytes - this.size;
      const part = rest.subarray(0, room);
      await (this.handle as FileHandle).write(part);
      this.size += part.length;
      rest = rest.subarray(part.length);
    }
  }

  private async rotate(): Promise<void> {
    await (this.handle as FileHandle).close();
    this.handle = undefined;
    await rename(this.logPath, previousSegmentOf(this.logPath));
    await this.openCurrent();
  }
}

/**
 * The newest `maxBytes` of a console log (both halves, oldest first), read from the ends of
 * the files: never the whole file into memory.
 */
export async function readConsoleLogEnd(consoleLogPath: string, maxBytes: number): Promise<Buffer> {
  const current = await readFileEnd(consoleLogPath, maxBytes);
  if (current.length >= maxBytes) return current;
  const previous = await readFileEnd(previousSegmentOf(consoleLogPath), maxBytes - current.length);
  return Buffer.concat([previous, current]);
}

async function readFileEnd(file: string, maxBytes: number): Promise<Buffer> {
  let handle: FileHandle;
  try {
    handle = await open(file, 'r');
  } catch {
    return Buffer.alloc(0);
  }
  try {
    const { size } = await handle.stat();
    const length = Math.min(size, maxBytes);
    const buffer = Buffer.alloc(length);
    const { bytesRead } = await handle.read(buffer, 0, length, size - length);
    return buffer.subarray(0, bytesRead);
  } finally {
    await handle.close();
  }
}

/** The last lines of a console log ('' if there is none), from at most its last 16 KiB. */
export async function consoleLogTail(consoleLogPath: string, lines = 15): Promise<string> {
  const text = (await readConsoleLogEnd(consoleLogPath, TAIL_MAX_BYTES)).toString('utf8');
  return text.trimEnd().split('\n').slice(-lines).join('\n');
}

/**
 * Keeps the newest part (at most 1 MiB, and no more than the console cap) of a failed
 * sandbox's console log as <logsDir>/<sessionId>.console.log, so that the reason a guest did
 * not come up can still be read once its session dir is gone. Returns the kept path, or
 * undefined if there was no log. Then drops the oldest kept logs until at most
 * `keptMaxCount` remain, taking at most `keptMaxBytes` in all: failures cannot fill the disk.
 */
export async function keepConsoleLog(
  consoleLogPath: string,
  logsDir: string,
  sessionId: string,
  limits: ConsoleLogLimits = DEFAULT_CONSOLE_LOG_LIMITS,
): Promise<string | undefined> {
  const kept = path.join(logsDir, `${sessionId}.console.log`);
  try {
    const newest = await readConsoleLogEnd(consoleLogPath, Math.min(KEPT_LOG_MAX_BYTES, limits.maxBytes, limits.keptMaxBytes));
    if (newest.length === 0 && !(await exists(consoleLogPath))) return undefined;
    await mkdir(logsDir, { recursive: true, mode: 0o700 });
    const handle = await open(kept, 'w', 0o600);
    try {
      await handle.write(newest);
    } finally {
      await handle.close();
    }
  } catch {
    return undefined;
  }
  await pruneKeptLogs(logsDir, limits).catch(() => undefined);
  return kept;
}

async function pruneKeptLogs(logsDir: string, limits: ConsoleLogLimits): Promise<void> {
  const names = (await readdir(logsDir)).filter((name) => name.endsWith('.console.log'));
  const logs = await Promise.all(
    names.map(async (name) => {
      const info = await stat(path.join(logsDir, name)).catch(() => undefined);
      return { name, mtime: info?.mtimeMs ?? 0, size: info?.size ?? 0 };
    }),
  );
  logs.sort((a, b) => b.mtime - a.mtime); // newest first
  let count = 0;
  let bytes = 0;
  for (const log of logs) {
    count++;
    bytes += log.size;
    if (count > limits.keptMaxCount || bytes > limits.keptMaxBytes) await rm(path.join(logsDir, log.name), { force: true });
  }
}

async function exists(file: string): Promise<boolean> {
  return stat(file).then(
    () => true,
    () => false,
  );
}
