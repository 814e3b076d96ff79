/**
 * The QEMU process of one VM: started inside the session's network namespace (so that it
 * can open the TAP device there), watched as our child, and stopped (vm-process.ts).
 *
 * Stopping is SIGTERM, a short wait, then SIGKILL. A clean shutdown of the guest is not
 * attempted: microvm has no power button the guest would act on (sandbox-init has no ACPI
 * daemon), and its state is thrown away anyway (the disk is a per-session copy-on-write
 * layer). On SIGTERM QEMU stops the VM and exits at once, closing its disks properly.
 */
import { stat } from 'node:fs/promises';
import { setTimeout as sleep } from 'node:timers/promises';
import type { ResourceNames } from '../../network/names.js';
import { findVmProcesses, type VmProcess, type VmProcessInfo } from '../vm/vm-process.js';

/** Resolves when QEMU has written its pidfile (it is up), or rejects if it exits first. */
export async function waitForPidFile(pidFile: string, vm: VmProcess, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (!vm.isAlive()) throw new Error('qemu exited while starting');
    if (
      await stat(pidFile).then(
        (s) => s.size > 0,
        () => false,
      )
    )
      return;
    await sleep(20);
  }
  throw new Error(`qemu did not start within ${timeoutMs} ms`);
}

/** Our QEMU processes, found by the `-name guest=<prefix><id>,...` option in their command lines. */
export function findQemuProcesses(names: ResourceNames): Promise<VmProcessInfo[]> {
  return findVmProcesses((argv) => sessionIdOfQemu(argv, names));
}

/** The session id of a QEMU command line of ours, or undefined for any other process. */
export function sessionIdOfQemu(argv: readonly string[], names: ResourceNames): string | undefined {
  if (!argv[0] || !/qemu-system/.test(argv[0])) return undefined;
  const at = argv.indexOf('-name');
  const value = at >= 0 ? argv[at + 1] : undefined;
  const guest = value && /^guest=([^,]+)/.exec(value)?.[1];
  return guest ? names.sessionIdOf(guest) : undefined;
}
