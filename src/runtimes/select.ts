import type { ResourceNames } from '../network/names.js';
import { ContainerRuntime } from './container/container-runtime.js';
import type { ContainerSettings } from './container/settings.js';
import { FirecrackerRuntime } from './firecracker/firecracker-runtime.js';
import { findOnPath, kvmUnavailable } from './firecracker/host/host-check.js';
import type { FirecrackerSettings } from './firecracker/settings.js';
import { probeKvm } from './qemu/accelerator.js';
import { QemuRuntime } from './qemu/qemu-runtime.js';
import type { QemuSettings } from './qemu/settings.js';
import type { Runtime } from './runtime.js';
import type { RuntimeChoice } from './settings.js';

export interface RuntimeSelection {
  runtime: Runtime;
  /** Why this runtime was picked, for the start-up log. */
  reason: string;
}

/**
 * Picks the runtime. `auto` prefers Firecracker (when /dev/kvm is usable and a firecracker
 * binary is found), then qemu with KVM (a probe, not just /dev/kvm existing), then the
 * container. qemu without KVM (TCG) must be asked for: it is real isolation, but boots take
 * 10-15 s instead of ~1 s.
 */
export async function selectRuntime(
  choice: RuntimeChoice,
  names: ResourceNames,
  qemu: QemuSettings,
  firecracker: FirecrackerSettings,
  container: ContainerSettings,
): Promise<RuntimeSelection> {
  switch (choice) {
    case 'container':
      await ContainerRuntime.check(container.runcBin);
      return { runtime: new ContainerRuntime(names, container), reason: 'requested with --runtime container' };
    case 'qemu': {
      const runtime = await QemuRuntime.create(names, qemu);
      return { runtime, reason: `requested with --runtime qemu; ${runtime.accelerator}: ${runtime.acceleratorReason}` };
    }
    case 'firecracker': {
      const runtime = await FirecrackerRuntime.create(names, firecracker);
      return { runtime, reason: `requested with --runtime firecracker; ${runtime.describe()}` };
    }
    case 'auto': {
      const skipped: string[] = [];
      const noFirecracker = kvmUnavailable() ?? (firecracker.firecrackerBin || findOnPath('firecracker') ? undefined : 'no firecracker binary (FIRECRACKER_BIN or PATH)');
      if (noFirecracker) {
        skipped.push(`firecracker: ${noFirecracker}`);
      } else {
        try {
          const runtime = await FirecrackerRuntime.create(names, firecracker);
          return { runtime, reason: `auto: ${runtime.describe()}` };
        } catch (err) {
          skipped.push((err as Error).message);
        }
      }
      const kvm = await probeKvm(qemu.binary);
      if (kvm.usable && qemu.accel !== 'tcg') {
        try {
          const runtime = await QemuRuntime.create(names, { ...qemu, accel: 'kvm' });
          return { runtime, reason: `auto: qemu with KVM (${skipped.join('; ')})` };
        } catch (err) {
          skipped.push(`qemu: ${(err as Error).message}`);
        }
      } else {
        skipped.push(`qemu with KVM: ${kvm.reason}`);
      }
      await ContainerRuntime.check(container.runcBin);
      return { runtime: new ContainerRuntime(names, container), reason: `auto: no VM runtime can run here (${skipped.join('; ')}); using runc containers` };
    }
  }
}
