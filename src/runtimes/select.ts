import type { RuntimeChoice } from '../config.js';
import type { ResourceNames } from '../network/names.js';
import { ContainerRuntime } from './container/container-runtime.js';
import { RuntimeUnavailableError, type Runtime } from './runtime.js';

export interface RuntimeSelection {
  runtime: Runtime;
  /** Why this runtime was picked, for the start-up log. */
  reason: string;
}

/**
 * Picks the runtime. `auto` prefers firecracker, then qemu with KVM, then the container;
 * the VM runtimes land in later releases, so today `auto` means the container runtime,
 * and asking for a VM runtime explicitly says so instead of silently running something else.
 */
export async function selectRuntime(choice: RuntimeChoice, names: ResourceNames): Promise<RuntimeSelection> {
  switch (choice) {
    case 'container':
      await ContainerRuntime.check();
      return { runtime: new ContainerRuntime(names), reason: 'requested with --runtime container' };
    case 'auto':
      await ContainerRuntime.check();
      return {
        runtime: new ContainerRuntime(names),
        reason: 'auto: no VM runtime is available in this build, using runc containers',
      };
    case 'qemu':
    case 'firecracker':
      throw new RuntimeUnavailableError(choice, 'this build does not include it yet; use --runtime container or auto');
  }
}
