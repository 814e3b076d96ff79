import { envInt, envString, positive, type Env } from '../util/env.js';

/** What one tenant may spend on the built-in Claude loop. */
export interface RunTenantLimits {
  /** Runs of the tenant running at once (SBX_TENANT_MAX_RUNS). */
  maxConcurrentRuns: number;
  /** Model tokens (input, output and cache) its runs may use per UTC day (SBX_TENANT_RUN_TOKENS_PER_DAY). */
  tokensPerDay: number;
  /** Seconds its runs may run per UTC day, all runs added up (SBX_TENANT_RUN_SECONDS_PER_DAY). */
  secondsPerDay: number;
}

export interface RunSettings {
  /** Models a run may ask for (SBX_RUN_MODELS); a dated id of one (`<model>-YYYYMMDD`) is allowed with it. */
  models: readonly string[];
  /** Tenants with their own allow-list (SBX_TENANT_RUN_MODELS="ci=claude-haiku-4-5|claude-sonnet-4-6,..."). */
  tenantModels: ReadonlyMap<string, readonly string[]>;
  limits: RunTenantLimits;
  /** Tenants with other limits (SBX_TENANT_RUN_LIMITS="ci=8/200000000/172800,..."). */
  tenantLimits: ReadonlyMap<string, RunTenantLimits>;
}

/**
 * Claude models that drive the loop's computer-use tools (computer_20241022 to
 * computer_20251124). claude-sonnet-4-5 ended on 2026-11-30; a model that needs another
 * computer tool is not listed. An operator changes the list with SBX_RUN_MODELS.
 */
export const DEFAULT_RUN_MODELS: readonly string[] = ['claude-sonnet-4-6', 'claude-opus-4-6', 'claude-opus-4-5', 'claude-haiku-4-5'];

/**
 * A tenant may run 4 runs at once, 50 M tokens a day (25 runs at the default maxTokens of
 * 2 M) and 24 hours of run time a day (48 runs at the default maxSeconds of 1800).
 */
export const DEFAULT_RUN_LIMITS: RunTenantLimits = { maxConcurrentRuns: 4, tokensPerDay: 50_000_000, secondsPerDay: 86_400 };

const MODEL = /^[A-Za-z0-9._:@-]{1,100}$/;
const TENANT = /^[a-z0-9][a-z0-9_.-]{0,62}$/;

function modelList(text: string, setting: string): string[] {
  const models = text
    .split(/[|,]/)
    .map((m) => m.trim())
    .filter(Boolean);
  for (const model of models) if (!MODEL.test(model)) throw new Error(`${setting}: "${model}" is not a model id`);
  if (models.length === 0) throw new Error(`${setting}: no model given`);
  return models;
}

export function runSettingsFromEnv(env: Env): RunSettings {
  const tenantModels = new Map<string, readonly string[]>();
  for (const entry of envString(env, 'SBX_TENANT_RUN_MODELS', '')
    .split(',')
    .map((e) => e.trim())
    .filter(Boolean)) {
    const [tenant = '', models = ''] = entry.split('=', 2);
    if (!TENANT.test(tenant) || !entry.includes('='))
      throw new Error(`SBX_TENANT_RUN_MODELS: "${entry}" is not tenant=model|model (e.g. ci=claude-haiku-4-5|claude-sonnet-4-6)`);
    tenantModels.set(tenant, modelList(models, 'SBX_TENANT_RUN_MODELS'));
  }
  const tenantLimits = new Map<string, RunTenantLimits>();
  for (const entry of envString(env, 'SBX_TENANT_RUN_LIMITS', '')
    .split(',')
    .map((e) => e.trim())
    .filter(Boolean)) {
    const match = /^([a-z0-9][a-z0-9_.-]{0,62})=(\d+)\/(\d+)\/(\d+)$/.exec(entry);
    const values = match ? [Number(match[2]), Number(match[3]), Number(match[4])] : [0, 0, 0];
    if (!match || values.some((v) => v < 1)) {
      throw new Error(
        `SBX_TENANT_RUN_LIMITS: "${entry}" is not tenant=runs/tokensPerDay/secondsPerDay with whole numbers of at least 1 (e.g. ci=8/200000000/172800)`,
      );
    }
    tenantLimits.set(match[1] as string, { maxConcurrentRuns: values[0] as number, tokensPerDay: values[1] as number, secondsPerDay: values[2] as number });
  }
  return {
    models: modelList(envString(env, 'SBX_RUN_MODELS', DEFAULT_RUN_MODELS.join(',')), 'SBX_RUN_MODELS'),
    tenantModels,
    limits: {
      maxConcurrentRuns: positive('SBX_TENANT_MAX_RUNS', envInt('SBX_TENANT_MAX_RUNS', DEFAULT_RUN_LIMITS.maxConcurrentRuns, env)),
      tokensPerDay: positive('SBX_TENANT_RUN_TOKENS_PER_DAY', envInt('SBX_TENANT_RUN_TOKENS_PER_DAY', DEFAULT_RUN_LIMITS.tokensPerDay, env)),
      secondsPerDay: positive('SBX_TENANT_RUN_SECONDS_PER_DAY', envInt('SBX_TENANT_RUN_SECONDS_PER_DAY', DEFAULT_RUN_LIMITS.secondsPerDay, env)),
    },
    tenantLimits,
  };
}

export const DEFAULT_RUN_SETTINGS: RunSettings = { models: DEFAULT_RUN_MODELS, tenantModels: new Map(), limits: DEFAULT_RUN_LIMITS, tenantLimits: new Map() };
