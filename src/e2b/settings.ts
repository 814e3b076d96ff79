import { envOptional, type Env } from '../util/env.js';

/** What an operator sets for the E2B-compatible surface (docs/e2b.md). */
export interface E2bSettings {
  /**
   * E2B template names read as ours: `base` (the SDK's default) and `desktop` (@e2b/desktop's)
   * by default, more from SBX_E2B_TEMPLATES (`name=ours,name=ours`). Any other name is taken
   * as one of our templates as it is.
   */
  templates: ReadonlyMap<string, string>;
}

const NAME = /^[a-z0-9][a-z0-9._-]{0,63}$/;

/** SBX_E2B_DESKTOP_TEMPLATE (default `xfce`: E2B Desktop starts its own X server and XFCE), SBX_E2B_BASE_TEMPLATE (default `minimal`), SBX_E2B_TEMPLATES. */
export function e2bSettingsFromEnv(env: Env): E2bSettings {
  const templates = new Map<string, string>([
    ['base', envOptional(env, 'SBX_E2B_BASE_TEMPLATE')?.trim() || 'minimal'],
    ['desktop', envOptional(env, 'SBX_E2B_DESKTOP_TEMPLATE')?.trim() || 'xfce'],
  ]);
  const extra = envOptional(env, 'SBX_E2B_TEMPLATES')?.trim();
  for (const pair of extra ? extra.split(',') : []) {
    const [name, ours, ...rest] = pair.split('=').map((s) => s.trim());
    if (!name || !ours || rest.length > 0 || !NAME.test(name) || !NAME.test(ours)) {
      throw new Error(`SBX_E2B_TEMPLATES must be e2bName=ourTemplate pairs separated by commas, got "${pair}"`);
    }
    templates.set(name, ours);
  }
  for (const [name, ours] of templates) {
    if (!NAME.test(ours)) throw new Error(`the E2B template ${name} must map to a template name, got "${ours}"`);
  }
  return { templates };
}

export const DEFAULT_E2B_SETTINGS: E2bSettings = {
  templates: new Map([
    ['base', 'minimal'],
    ['desktop', 'xfce'],
  ]),
};
