import { readFile } from 'node:fs/promises';
import { setTimeout as sleep } from 'node:timers/promises';
import { processStartTime, watchExit } from '../../../host/process-watch.js';
import { settlesWithin, stoppableProcess, type VmExit, type VmProcess } from '../../vm/vm-process.js';

/**
 * The Firecracker process of a jail started with `--new-pid-ns`: the jailer clones it into
 * a pid namespace of its own (where it is init: whatever it forks dies with it, and it sees
 * no host process), writes its pid as the host sees it to `<jail root>/<exec name>.pid`,
 * and exits. So the VMM is no child of ours: this waits for the jailer to finish, reads the
 * pid, and watches that process through /proc (pid and start time, so a recycled pid is
 * never taken for it). Its exit status cannot be known (only a parent can wait for it):
 * an exit is reported with `notOurChild`, and as killed by SIGKILL when we killed it.
 */
export async function vmmOfPidNamespace(jailer: VmProcess, pidFile: string, timeoutMs: number): Promise<VmProcess> {
  if (!(await settlesWithin(jailer.exited, timeoutMs))) {
    await jailer.stop(500);
    throw new Error(`the jailer did not hand over to Firecracker within ${timeoutMs} ms`);
  }
  const jailerExit = await jailer.exited;
  if (jailerExit.code !== 0) {
    throw new Error(
      `the jailer ${jailerExit.signal ? `was killed by ${jailerExit.signal}` : `exited with code ${jailerExit.code}`} (its message is in the console log)`,
    );
  }
  const pid = await readPidFile(pidFile);
  const startTime = processStartTime(pid);
  if (!startTime) throw new Error(`Firecracker (pid ${pid}, from ${pidFile}) exited at once (its message is in the console log)`);
  return watchedVmm(pid, startTime);
}

/** The pid the jailer wrote (it writes it before it exits, so it is there; a short retry covers a slow disk). */
async function readPidFile(pidFile: string): Promise<number> {
  for (let attempt = 0; ; attempt++) {
    const text = await readFile(pidFile, 'utf8').catch(() => '');
    if (/^\d+\s*$/.test(text)) return Number(text);
    if (attempt >= 25) throw new Error(`the jailer exited without writing Firecracker's pid to ${pidFile}`);
    await sleep(20);
  }
}

function watchedVmm(pid: number, startTime: string): VmProcess {
  const watcher = watchExit(pid, startTime, 100);
  let killedBy: NodeJS.Signals | null = null;
  const exited: Promise<VmExit> = watcher.exited.then(() => ({ code: null, signal: killedBy, notOurChild: true }));
  // The init of a pid namespace gets from outside only the signals it handles (and
  // SIGKILL): SIGTERM is asked for, SIGKILL follows.
  const send = (signal: NodeJS.Signals) => {
    if (signal === 'SIGKILL') killedBy = signal;
    try {
      process.kill(pid, signal);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'ESRCH') throw err;
    }
  };
  return stoppableProcess(pid, exited, send, 'firecracker');
}
