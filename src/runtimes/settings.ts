import { envChoice, type Env } from '../util/env.js';
import { RUNTIMES, type RuntimeChoice, type RuntimeSettingsMap } from './registered.js';

export type { RuntimeChoice };

/** Which runtime runs the sandboxes, and each registered runtime's own settings (all read, whichever is chosen). */
export interface RuntimeSettings {
  /** SBX_RUNTIME (`serve --runtime`, default auto: see registry.ts). */
  runtime: RuntimeChoice;
  runtimes: RuntimeSettingsMap;
}

/**
 * Every runtime's settings are read and checked, not only the chosen one's: `auto` may pick
 * any of them, and a bad value fails the start rather than the first create.
 */
export function runtimeSettingsFromEnv(env: Env): RuntimeSettings {
  return {
    runtime: runtimeChoiceFromEnv(env),
    runtimes: RUNTIMES.settingsFromEnv(env),
  };
}

export function runtimeChoiceFromEnv(env: Env): RuntimeChoice {
  return envChoice('SBX_RUNTIME', RUNTIMES.choices, 'auto', env);
}
