/**
 * What the two VM runtimes (QEMU, Firecracker) do alike around their VMM process: the
 * console log kept and quoted when a VM fails to start or dies, the exit reported as
 * ExitInfo, the kernel and initrd an operator may override, and a VMM of an earlier run
 * adopted or reclaimed (its uid held again, or freed).
 */
import { statSync } from 'node:fs';
import type { GuestImage } from '../../guest/image/builder.js';
import type { GuestEndpoint } from '../../transport/index.js';
import { adoptedProcess } from '../adopt-process.js';
import { consoleLogTail, keepConsoleLog, type ConsoleLogLimits } from '../console-log.js';
import type { ConsolePipe } from '../console-pipe.js';
import type { AdoptedSandbox, ExitInfo, SandboxSpec } from '../runtime.js';
import { killOrphan, type VmExit, type VmProcess, type VmProcessInfo } from './vm-process.js';
import { processUid, type VmUserPool } from './vm-user-pool.js';

/** Where a VM's console goes and may be kept (the session dir goes with the session). */
export interface VmConsole {
  pipe: ConsolePipe;
  spec: Pick<SandboxSpec, 'logsDir' | 'sessionId'>;
  limits: ConsoleLogLimits;
}

/** Keeps the console log out of the session dir; returns where (undefined: nothing to keep). */
async function keep(vmConsole: VmConsole): Promise<string | undefined> {
  await vmConsole.pipe.quiet();
  return keepConsoleLog(vmConsole.pipe.logPath, vmConsole.spec.logsDir, vmConsole.spec.sessionId, vmConsole.limits);
}

/**
 * A VM that failed to start: the error says why, with its exit when known, where its console
 * log was kept, and its last lines (the VMM's own words: a refused option, a missing file).
 */
export async function vmStartError(err: Error, vmConsole: VmConsole, exitNote?: string): Promise<Error> {
  const kept = await keep(vmConsole);
  const tail = await consoleLogTail(vmConsole.pipe.logPath, 5);
  return new Error(`${err.message}${exitNote ? ` (it ${exitNote})` : ''}${kept ? `; console log kept at ${kept}` : ''}${tail ? `:\n${tail}` : ''}`, {
    cause: err,
  });
}

/**
 * The VM's `exited`: how its VMM ended, and, for a crash (not a stop we asked for), where
 * its console log was kept.
 */
export function vmExited(vmm: VmProcess, what: string, describe: (exit: VmExit) => string, vmConsole: VmConsole): Promise<ExitInfo> {
  return vmm.exited.then(async (exit): Promise<ExitInfo> => {
    const reason = `the VM's ${what} (pid ${vmm.pid}) ${describe(exit)}`;
    if (vmm.stopping) return { code: exit.code, reason };
    const kept = await keep(vmConsole);
    return { code: exit.code, reason: kept ? `${reason}; console log kept at ${kept}` : reason, consoleLogKeptAt: kept };
  });
}

/** The kernel and initrd set by the operator (SBX_*_KERNEL, SBX_*_INITRD), if any. */
export interface BootFileOverrides {
  kernel?: string;
  initrd?: string;
}

/**
 * A VM's writable disk, MiB: its root disk is the image's ext4 (a copy, or a qcow2 overlay
 * on it), so the guest can make it hold at most that size (plus the overlay's few MiB of
 * metadata). Unknown (the file is not readable): 0, and admission counts only the rest.
 */
export function imageDiskMiB(image: GuestImage): number {
  try {
    return Math.ceil(statSync(image.ext4).size / 2 ** 20) + 16;
  } catch {
    return 0;
  }
}

/**
 * The initrd to boot with: the operator's, else the image's; none with a kernel of one's own
 * given without one (such a kernel usually has everything built in).
 */
export function initrdFor(image: GuestImage, overrides: BootFileOverrides): string | undefined {
  return overrides.kernel && !overrides.initrd ? undefined : (overrides.initrd ?? image.initrd);
}

/** A VMM of an earlier run, still running: its uid is held again, so no new VM gets it. */
export async function adoptVmm(
  found: VmProcessInfo | undefined,
  what: string,
  users: VmUserPool,
  endpoint: GuestEndpoint | undefined,
  sessionDir: string,
  consoleLog: ConsoleLogLimits,
  release: () => Promise<void>,
): Promise<AdoptedSandbox | undefined> {
  // A VM is reached at its address: without one (no lease recorded) it cannot be taken back.
  if (!found || !endpoint) return undefined;
  const uid = await processUid(found.pid);
  if (uid !== undefined) users.claim(uid);
  return adoptedProcess(what, found, endpoint, sessionDir, consoleLog, release);
}

/** Kills the orphaned VMMs of one session (found by their command line) and frees their uids. */
export async function killOrphanVmms(orphans: readonly VmProcessInfo[], sessionId: string, name: string, users: VmUserPool): Promise<void> {
  for (const orphan of orphans) {
    if (orphan.sessionId !== sessionId) continue;
    const uid = await processUid(orphan.pid);
    await killOrphan(orphan, name);
    if (uid !== undefined) users.release(uid);
  }
}
