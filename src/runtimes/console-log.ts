import { copyFile, mkdir, readdir, readFile, rm, stat } from 'node:fs/promises';
import path from 'node:path';

/** Failed sessions' console logs kept at most; the oldest go first. */
const KEPT_LOGS = 100;

/** The directory for kept console logs: <stateDir>/logs. */
export function logsDirOf(stateDir: string): string {
  return path.join(stateDir, 'logs');
}

/**
 * Copies a failed sandbox's console log out of its session dir (which is removed with the
 * session) to <logsDir>/<sessionId>.console.log, so that the reason a guest did not come up
 * can still be read afterwards. Returns the kept path, or undefined if there was no log.
 * Keeps the newest KEPT_LOGS logs, so failures cannot fill the disk.
 */
export async function keepConsoleLog(consoleLogPath: string, logsDir: string, sessionId: string): Promise<string | undefined> {
  const kept = path.join(logsDir, `${sessionId}.console.log`);
  try {
    await mkdir(logsDir, { recursive: true, mode: 0o700 });
    await copyFile(consoleLogPath, kept);
  } catch {
    return undefined;
  }
  await pruneLogs(logsDir).catch(() => undefined);
  return kept;
}

async function pruneLogs(logsDir: string): Promise<void> {
  const names = (await readdir(logsDir)).filter((name) => name.endsWith('.console.log'));
  if (names.length <= KEPT_LOGS) return;
  const dated = await Promise.all(names.map(async (name) => ({ name, mtime: (await stat(path.join(logsDir, name))).mtimeMs })));
  dated.sort((a, b) => a.mtime - b.mtime);
  for (const { name } of dated.slice(0, dated.length - KEPT_LOGS)) await rm(path.join(logsDir, name), { force: true });
}

/** The last lines of a console log ('' if there is none), for an error message. */
export async function consoleLogTail(consoleLogPath: string, lines = 15): Promise<string> {
  const text = await readFile(consoleLogPath, 'utf8').catch(() => '');
  return text.trimEnd().split('\n').slice(-lines).join('\n');
}
