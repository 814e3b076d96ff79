import type { RuntimeEntry } from '../entry.js';
import { CGROUP, PROCESS } from '../host-resources.js';
import { VM_USER } from '../vm/resources.js';
import { VOLUME_OWNER } from '../vm/vm-volumes.js';
import { probeKvm } from './accelerator.js';
import { QemuRuntime } from './qemu-runtime.js';
import { qemuSettingsFromEnv, type QemuSettings } from './settings.js';

const RESOURCES = { process: PROCESS, 'volume-owner': VOLUME_OWNER, cgroup: CGROUP, 'vm-user': VM_USER };

/**
 * QEMU VMs. `auto` takes it only with KVM (a probe that runs a guest, not just /dev/kvm
 * existing): under TCG it is real isolation, but boots take 10-15 s instead of ~1 s, so TCG
 * must be asked for.
 */
export const qemuRuntime: RuntimeEntry<'qemu', QemuSettings, keyof typeof RESOURCES> = {
  name: 'qemu',
  features: { desktop: true, pause: true, vsock: false },
  autoRank: 20,
  settingsFromEnv: qemuSettingsFromEnv,
  vcpus: (settings) => settings.smp,
  async probe(settings) {
    if (settings.accel === 'tcg') return 'SBX_QEMU_ACCEL=tcg, which auto never picks (ask for --runtime qemu)';
    const kvm = await probeKvm(settings.binary);
    return kvm.usable ? undefined : `no KVM: ${kvm.reason}`;
  },
  create: (names, settings, auto) => QemuRuntime.create(names, auto ? { ...settings, accel: 'kvm' } : settings),
  resources: RESOURCES,
};
