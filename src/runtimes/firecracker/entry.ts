import type { ResourceKindEntry, RuntimeEntry } from '../entry.js';
import { CGROUP, PROCESS } from '../host-resources.js';
import { VM_USER } from '../vm/resources.js';
import { VOLUME_OWNER } from '../vm/vm-volumes.js';
import { FirecrackerRuntime } from './firecracker-runtime.js';
import { findOnPath, kvmUnavailable } from './host/host-check.js';
import { firecrackerSettingsFromEnv, type FirecrackerSettings } from './settings.js';

/**
 * A VM's jail (the jailer's chroot): removed like a session directory, never through a
 * mount, so that a view of the shared image left mounted keeps it on disk (logged, counted)
 * rather than emptied.
 */
const JAIL: ResourceKindEntry = { stage: 'files', reclaim: (name, ctx) => ctx.removeDir(name) };

const RESOURCES = { process: PROCESS, jail: JAIL, 'volume-owner': VOLUME_OWNER, cgroup: CGROUP, 'vm-user': VM_USER };

/** Firecracker microVMs: `auto`'s first choice where /dev/kvm works and a firecracker binary is found. */
export const firecrackerRuntime: RuntimeEntry<'firecracker', FirecrackerSettings, keyof typeof RESOURCES> = {
  name: 'firecracker',
  features: { desktop: true, pause: true, vsock: true },
  autoRank: 10,
  settingsFromEnv: firecrackerSettingsFromEnv,
  vcpus: (settings) => settings.vcpus,
  probe: async (settings) =>
    kvmUnavailable() ?? (settings.firecrackerBin || findOnPath('firecracker') ? undefined : 'no firecracker binary (FIRECRACKER_BIN or PATH)'),
  create: (names, settings) => FirecrackerRuntime.create(names, settings),
  resources: RESOURCES,
};
