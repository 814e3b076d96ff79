import { envChoice, type Env } from '../util/env.js';
import { containerSettingsFromEnv, type ContainerSettings } from './container/settings.js';
import { firecrackerSettingsFromEnv, type FirecrackerSettings } from './firecracker/settings.js';
import { qemuSettingsFromEnv, type QemuSettings } from './qemu/settings.js';

export const RUNTIME_NAMES = ['auto', 'container', 'qemu', 'firecracker'] as const;
export type RuntimeChoice = (typeof RUNTIME_NAMES)[number];

/** Which runtime runs the sandboxes, and each runtime's own settings (all read, whichever is chosen). */
export interface RuntimeSettings {
  /** SBX_RUNTIME (`serve --runtime`, default auto: see select.ts). */
  runtime: RuntimeChoice;
  runtimes: {
    container: ContainerSettings;
    qemu: QemuSettings;
    firecracker: FirecrackerSettings;
  };
}

/**
 * Every runtime's settings are read and checked, not only the chosen one's: `auto` may pick
 * any of them, and a bad value fails the start rather than the first create.
 */
export function runtimeSettingsFromEnv(env: Env): RuntimeSettings {
  return {
    runtime: envChoice('SBX_RUNTIME', RUNTIME_NAMES, 'auto', env),
    runtimes: {
      container: containerSettingsFromEnv(env),
      qemu: qemuSettingsFromEnv(env),
      firecracker: firecrackerSettingsFromEnv(env),
    },
  };
}
