import { qemuSettingsFromEnv, type QemuSettings, type RuntimeChoice } from '../config.js';
import type { ResourceNames } from '../network/names.js';
import { ContainerRuntime } from './container/container-runtime.js';
import { probeKvm } from './qemu/accelerator.js';
import { QemuRuntime } from './qemu/qemu-runtime.js';
import { RuntimeUnavailableError, type Runtime } from './runtime.js';

export interface RuntimeSelection {
  runtime: Runtime;
  /** Why this runtime was picked, for the start-up log. */
  reason: string;
}

/**
 * Picks the runtime. `auto` prefers firecracker, then qemu with KVM, then the container.
 * Firecracker lands in a later release, so today `auto` means qemu when KVM really works
 * here (a probe, not just /dev/kvm existing), else the container. qemu without KVM (TCG)
 * must be asked for: it is real isolation, but boots take 10-15 s instead of ~1 s.
 */
export async function selectRuntime(
  choice: RuntimeChoice,
  names: ResourceNames,
  qemu: QemuSettings = qemuSettingsFromEnv(),
): Promise<RuntimeSelection> {
  switch (choice) {
    case 'container':
      await ContainerRuntime.check();
      return { runtime: new ContainerRuntime(names), reason: 'requested with --runtime container' };
    case 'qemu': {
      const runtime = await QemuRuntime.create(names, qemu);
      return { runtime, reason: `requested with --runtime qemu; ${runtime.accelerator}: ${runtime.acceleratorReason}` };
    }
    case 'auto': {
      const kvm = await probeKvm(qemu.binary);
      let why = kvm.reason;
      if (kvm.usable && qemu.accel !== 'tcg') {
        try {
          const runtime = await QemuRuntime.create(names, { ...qemu, accel: 'kvm' });
          return { runtime, reason: 'auto: KVM works and the firecracker runtime is not in this build: qemu with KVM' };
        } catch (err) {
          why = (err as Error).message;
        }
      }
      await ContainerRuntime.check();
      return { runtime: new ContainerRuntime(names), reason: `auto: no VM runtime can run here (${why}); using runc containers` };
    }
    case 'firecracker':
      throw new RuntimeUnavailableError(choice, 'this build does not include it yet; use --runtime qemu, container or auto');
  }
}
