/**
 * The Firecracker process of one VM (or the jailer, which execs into it: same pid): started,
 * stopped gracefully, and found again after a crash of the orchestrator.
 */
import path from 'node:path';
import type { ResourceNames } from '../../../network/names.js';
import { findVmProcesses, settlesWithin, type VmExit, type VmProcess, type VmProcessInfo } from '../../vm/vm-process.js';
import type { FirecrackerClient } from '../api/client.js';

/** How long the guest gets to power off after Ctrl-Alt-Del before the VMM is killed. */
export const GRACEFUL_STOP_MS = 2_000;

/**
 * Graceful stop: `SendCtrlAltDel` makes the guest kernel signal its init (sandbox-init traps
 * SIGINT), which stops the desktop, syncs and reboots; with `reboot=k` a guest reboot ends
 * the Firecracker process. If it is not gone within GRACEFUL_STOP_MS (or the VM was never
 * started, when the action is refused), SIGTERM, then SIGKILL. Idempotent.
 */
export async function stopVmm(vmm: VmProcess, client: FirecrackerClient, started: boolean): Promise<void> {
  if (!vmm.isAlive()) return;
  vmm.markStopping();
  if (started) {
    const asked = await client.putAction('SendCtrlAltDel', { timeoutMs: 1_000 }).then(
      () => true,
      () => false,
    );
    if (asked && (await settlesWithin(vmm.exited, GRACEFUL_STOP_MS))) return;
  }
  await vmm.stop(500);
}

/**
 * Firecracker's command line carries `--id <prefix><sessionId>` both jailed (the jailer
 * passes its own `--id` on) and not (we pass it): that is how our VMMs are told apart from
 * anyone else's on the host.
 */
export function sessionIdOfFirecracker(argv: readonly string[], names: ResourceNames): string | undefined {
  if (!argv[0] || !path.basename(argv[0]).includes('firecracker')) return undefined;
  const at = argv.indexOf('--id');
  const id = at >= 0 ? argv[at + 1] : undefined;
  return id ? names.sessionIdOf(id) : undefined;
}

export function findFirecrackerProcesses(names: ResourceNames): Promise<VmProcessInfo[]> {
  return findVmProcesses((argv) => sessionIdOfFirecracker(argv, names));
}

/** "exited with code 0 (the guest powered off, rebooted or panicked)", "was killed by SIGKILL", ... */
export function describeVmmExit(exit: VmExit): string {
  if (exit.signal) return `was killed by ${exit.signal}`;
  if (exit.notOurChild)
    return 'exited (the guest powered off, rebooted or panicked, or the VMM failed: its status is not known, it ran in a pid namespace of its own)';
  if (exit.code === 0) return 'exited with code 0 (the guest powered off, rebooted or panicked)';
  if (exit.code === null) return 'could not be started';
  return `exited with code ${exit.code} (Firecracker or the jailer failed; its message is in the console log)`;
}
