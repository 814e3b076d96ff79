import { open } from 'node:fs/promises';
import { readFileSync } from 'node:fs';

/**
 * Watches a process we did not spawn (runc's detached container init). A process is
 * identified by pid and start time, so a recycled pid is never mistaken for it.
 */
export function processStartTime(pid: number): string | undefined {
  try {
    return parseStat(readFileSync(`/proc/${pid}/stat`, 'utf8'))?.startTime;
  } catch {
    return undefined;
  }
}

function parseStat(stat: string): { state: string; startTime: string } | undefined {
  // The command name (field 2) may contain spaces and parentheses: split after the last ')'.
  const rest = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  const state = rest[0];
  const startTime = rest[19];
  return state && startTime ? { state, startTime } : undefined;
}

/**
 * /proc/<pid>/stat is a few hundred bytes (its longest fields are 20-digit numbers): one read
 * into a small buffer. readFile would allocate 64 KiB for a file whose size /proc gives as 0,
 * twice a second for every session: garbage the collector then has to chase.
 */
const STAT_READ_BYTES = 2048;

async function readStat(pid: number): Promise<string> {
  const handle = await open(`/proc/${pid}/stat`, 'r');
  try {
    const buffer = Buffer.allocUnsafe(STAT_READ_BYTES);
    const { bytesRead } = await handle.read(buffer, 0, buffer.length, 0);
    return buffer.toString('utf8', 0, bytesRead);
  } finally {
    await handle.close();
  }
}

export async function isProcessAlive(pid: number, startTime: string): Promise<boolean> {
  try {
    const parsed = parseStat(await readStat(pid));
    return parsed !== undefined && parsed.startTime === startTime && parsed.state !== 'Z' && parsed.state !== 'X';
  } catch {
    return false;
  }
}

/** Resolves when the process is gone; polls cheaply and never keeps the event loop alive. */
export function watchExit(pid: number, startTime: string, intervalMs = 500): { exited: Promise<void>; stop(): void } {
  let timer: NodeJS.Timeout | undefined;
  let stopped = false;
  const exited = new Promise<void>((resolve) => {
    const check = async () => {
      if (stopped) return;
      if (!(await isProcessAlive(pid, startTime))) return resolve();
      timer = setTimeout(() => void check(), intervalMs);
      timer.unref();
    };
    void check();
  });
  return {
    exited,
    stop() {
      stopped = true;
      if (timer) clearTimeout(timer);
    },
  };
}

/** Waits until the process is gone (a zombie counts as gone), or the time is up. */
export async function waitForExit(pid: number, startTime: string, timeoutMs: number): Promise<boolean> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (!(await isProcessAlive(pid, startTime))) return true;
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
  return false;
}
