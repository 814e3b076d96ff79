import { ON_IDLE, type OnIdle } from './session-record.js';
import type { RequestDefaults } from './session-request.js';

/**
 * A session's limits and defaults, and the tenants that get others (SBX_TENANT_SESSION_LIMITS):
 * the longest lifetime (running time) a session may ask for, which is also its lifetime by
 * default; how long it may stay paused before it is destroyed; its idle timeout and what that
 * timeout does when its create says nothing. A tenant's entry replaces the orchestrator's value
 * for that tenant only, up or down: a CI tenant may run for days while the others get an hour.
 */
export interface SessionLimits {
  /** The longest lifetime a create (or a PATCH) may ask for, and the lifetime of one that asks for none. */
  maxLifetimeSeconds: number;
  /** How long a paused session is kept before it is destroyed and its state freed; also the most a create may ask for. */
  pausedRetentionSeconds: number;
  /** The idle timeout of a session whose create names none. */
  timeoutSeconds: number;
  /** What the idle timeout does when the create says nothing. */
  onIdle: OnIdle;
}

export type TenantSessionLimits = Partial<SessionLimits>;

export const TENANT_SESSION_LIMITS_SETTING = 'SBX_TENANT_SESSION_LIMITS';

/** The bounds of each number (the create schema's for timeoutSeconds; a lifetime or a retention of at most a year). */
const NUMBER_BOUNDS: Record<Exclude<keyof SessionLimits, 'onIdle'>, [number, number]> = {
  maxLifetimeSeconds: [10, 366 * 86_400],
  pausedRetentionSeconds: [1, 366 * 86_400],
  timeoutSeconds: [10, 86_400],
};
const KEYS = [...Object.keys(NUMBER_BOUNDS), 'onIdle'] as Array<keyof SessionLimits>;
/** As API keys spell tenants (api/auth/key-store.ts, TENANT_PATTERN). */
const TENANT = /^[a-z0-9][a-z0-9_.-]{0,62}$/;
const EXAMPLE = 'ci=maxLifetimeSeconds:604800/pausedRetentionSeconds:2592000/onIdle:pause,trial=maxLifetimeSeconds:600';

/**
 * SBX_TENANT_SESSION_LIMITS: `tenant=key:value/key:value`, tenants separated by commas, the keys
 * those of SessionLimits. Anything else stops the start with an error naming the variable, the
 * tenant and the key, and the expected form.
 */
export function parseTenantSessionLimits(text: string, setting = TENANT_SESSION_LIMITS_SETTING): Map<string, TenantSessionLimits> {
  const tenants = new Map<string, TenantSessionLimits>();
  for (const entry of text
    .split(',')
    .map((e) => e.trim())
    .filter(Boolean)) {
    const equals = entry.indexOf('=');
    const tenant = equals < 0 ? '' : entry.slice(0, equals).trim();
    if (equals < 0 || entry.slice(equals + 1).trim() === '') {
      throw new Error(`${setting}: "${entry}" is not tenant=key:value/key:value (e.g. ${EXAMPLE})`);
    }
    if (!TENANT.test(tenant)) throw new Error(`${setting}: "${tenant}" is not a tenant name (lower-case letters, digits, _ . -; as API keys name them)`);
    if (tenants.has(tenant)) throw new Error(`${setting}: tenant "${tenant}" is named twice`);
    tenants.set(tenant, parseLimits(entry.slice(equals + 1), `${setting}: tenant "${tenant}"`));
  }
  return tenants;
}

function parseLimits(text: string, where: string): TenantSessionLimits {
  const limits: TenantSessionLimits = {};
  for (const pair of text.split('/').map((p) => p.trim())) {
    const colon = pair.indexOf(':');
    const key = (colon < 0 ? pair : pair.slice(0, colon)).trim() as keyof SessionLimits;
    const value = colon < 0 ? '' : pair.slice(colon + 1).trim();
    if (!KEYS.includes(key)) throw new Error(`${where}: "${pair}" is not key:value with a key of ${KEYS.join(', ')}`);
    if (key in limits) throw new Error(`${where}: ${key} is given twice`);
    if (key === 'onIdle') {
      if (!(ON_IDLE as readonly string[]).includes(value)) throw new Error(`${where}: onIdle must be one of ${ON_IDLE.join(', ')}, got "${value}"`);
      limits.onIdle = value as OnIdle;
      continue;
    }
    const [min, max] = NUMBER_BOUNDS[key];
    const seconds = /^\d{1,9}$/.test(value) ? Number(value) : NaN;
    if (!(seconds >= min && seconds <= max)) throw new Error(`${where}: ${key} must be a whole number of seconds from ${min} to ${max}, got "${value}"`);
    limits[key] = seconds;
  }
  return limits;
}

/** The limits of each tenant: the orchestrator's, with a tenant's own entry over them. */
export class TenantLimits {
  constructor(
    readonly defaults: SessionLimits,
    private readonly tenants: ReadonlyMap<string, TenantSessionLimits> = new Map(),
  ) {}

  of(tenant: string): SessionLimits {
    const own = this.tenants.get(tenant);
    return own ? { ...this.defaults, ...own } : this.defaults;
  }

  /** The tenant's own entry, if it has one (a refusal then names the setting it comes from). */
  own(tenant: string): TenantSessionLimits | undefined {
    return this.tenants.get(tenant);
  }

  /** Whose maximum lifetime the tenant gets, as a refusal says it. */
  lifetimeOf(tenant: string): string {
    return this.tenants.get(tenant)?.maxLifetimeSeconds !== undefined
      ? `the maximum lifetime of tenant "${tenant}" in ${TENANT_SESSION_LIMITS_SETTING}`
      : "this orchestrator's maximum lifetime";
  }
}

/**
 * A create's defaults for `tenant`: the orchestrator's (`base`: template, autoResume, and the
 * limits of a tenant without an entry) with the tenant's own limits over them, each refusal
 * naming where its maximum comes from.
 */
export function tenantDefaults(base: RequestDefaults, limits: TenantLimits | undefined, tenant: string): RequestDefaults {
  const own = limits?.own(tenant);
  if (!own) return base;
  const whose = (what: string) => `the ${what} of tenant "${tenant}" in ${TENANT_SESSION_LIMITS_SETTING}`;
  return {
    ...base,
    ...(own.maxLifetimeSeconds !== undefined ? { maxLifetimeSeconds: own.maxLifetimeSeconds } : {}),
    ...(own.pausedRetentionSeconds !== undefined ? { pausedRetentionSeconds: own.pausedRetentionSeconds } : {}),
    ...(own.timeoutSeconds !== undefined ? { defaultTimeoutSeconds: own.timeoutSeconds } : {}),
    ...(own.onIdle !== undefined ? { onIdle: own.onIdle } : {}),
    whose: {
      ...(own.maxLifetimeSeconds !== undefined ? { maxLifetimeSeconds: whose('maximum lifetime') } : {}),
      ...(own.pausedRetentionSeconds !== undefined ? { pausedRetentionSeconds: whose('paused retention') } : {}),
    },
  };
}
