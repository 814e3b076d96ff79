import path from 'node:path';
import { run } from '../../util/exec.js';
import type { ResourceKindEntry, RuntimeEntry } from '../entry.js';
import { DISK, MOUNT, PROCESS } from '../host-resources.js';
import { RuntimeUnavailableError } from '../runtime.js';
import { ContainerRuntime } from './container-runtime.js';
import { idmappedMountsUnavailable } from './idmapped-mount.js';
import { containerSettingsFromEnv, type ContainerSettings } from './settings.js';

/** `<runc root>/<container id>`: runc's state of a container, deleted by runc itself. */
const RUNC_CONTAINER: ResourceKindEntry = {
  stage: 'runtime-state',
  async reclaim(name) {
    const res = await run(['runc', '--root', path.dirname(name), 'delete', '--force', path.basename(name)], { allowFailure: true, timeoutMs: 15_000 });
    if (res.exitCode !== 0 && !/not exist|not found/i.test(res.stderr)) throw new Error(res.stderr.trim());
  },
};

/**
 * `<first host id>:<count>`: a container's user namespace (see store.leaseIdRange). Nothing to
 * undo on the host: the range is free once the processes and mounts that used it (reclaimed
 * in earlier stages) are gone.
 */
const ID_RANGE: ResourceKindEntry = { stage: 'leases', reclaim: async () => undefined };

const RESOURCES = { process: PROCESS, container: RUNC_CONTAINER, mount: MOUNT, disk: DISK, 'id-range': ID_RANGE };

/** runc containers: the last of `auto`'s choices (the host kernel is the boundary). */
export const containerRuntime: RuntimeEntry<'container', ContainerSettings, keyof typeof RESOURCES> = {
  name: 'container',
  features: { desktop: true, pause: true, vsock: false },
  autoRank: 30,
  settingsFromEnv: containerSettingsFromEnv,
  vcpus: (settings) => settings.cpus,
  async create(names, settings) {
    await checkContainerHost(settings.runcBin);
    return new ContainerRuntime(names, settings);
  },
  resources: RESOURCES,
};

/** Throws a RuntimeUnavailableError saying what to install if runc cannot be used. */
export async function checkContainerHost(runcBin: string): Promise<void> {
  const res = await run([runcBin, '--version'], { allowFailure: true }).catch(() => undefined);
  if (!res || res.exitCode !== 0) {
    throw new RuntimeUnavailableError('container', 'runc was not found: install it with `apt-get install runc` (or set RUNC_BIN)');
  }
  if (process.getuid?.() !== 0) {
    throw new RuntimeUnavailableError('container', 'it needs root (network namespaces, mounts, runc): run the orchestrator as root');
  }
  const idmap = idmappedMountsUnavailable();
  if (idmap) throw new RuntimeUnavailableError('container', idmap);
}
