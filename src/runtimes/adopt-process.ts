import { watchExit } from '../host/process-watch.js';
import type { ConsoleLogLimits } from './console-log.js';
import { consoleLogPathOf, reattachConsole } from './console-pipe.js';
import type { AdoptedSandbox, RunningSandbox } from './runtime.js';
import type { GuestEndpoint } from '../transport/index.js';

/**
 * A sandbox whose top process (a container init, a VM process) outlived the orchestrator
 * that started it: it is no one's child now, so its exit is watched through /proc (pid and
 * start time, so a recycled pid is never taken for it). Its console FIFO is read again into
 * the capped log (what it printed while no orchestrator ran was dropped: console-pipe.ts).
 */
export async function adoptedProcess(
  what: string,
  process: { pid: number; startTime: string },
  endpoint: GuestEndpoint,
  sessionDir: string,
  consoleLog: ConsoleLogLimits,
  release: () => Promise<void>,
): Promise<AdoptedSandbox> {
  const consoleLogPath = consoleLogPathOf(sessionDir);
  const consolePipe = await reattachConsole(sessionDir, consoleLog.maxBytes).catch(() => undefined);
  const watcher = watchExit(process.pid, process.startTime);
  let alive = true;
  const exited = watcher.exited.then(() => {
    alive = false;
    return { code: null, reason: `the ${what} (pid ${process.pid}) exited` };
  });
  const sandbox: RunningSandbox = { endpoint, consoleLogPath, pid: process.pid, exited, isAlive: () => alive };
  return {
    sandbox,
    async release() {
      // Stop watching first, so that the destroy is not reported as a crash.
      watcher.stop();
      try {
        await release();
      } finally {
        await consolePipe?.close();
      }
    },
  };
}
