import type { FastifyInstance, FastifyRequest } from 'fastify';
import { LimitError } from '../errors.js';

/**
 * Per-tenant request limits, so that one tenant's client (a runaway agent loop, a script
 * gone wrong, a stolen key) cannot take the event loop, the SSH channels or the host's CPU
 * from the others:
 * - at most `maxConcurrent` requests in flight (counted from authentication until the
 *   response is closed, sent or abandoned);
 * - a token bucket: `perSecond` requests a second on average, bursts of up to `burst`.
 * Over either, the request is answered 429 at once, before its body is read, with
 * Retry-After. Anonymous requests on open routes (/healthz, /openapi.json, local /metrics)
 * have no tenant and are not counted.
 *
 * A small module rather than @fastify/rate-limit: that plugin counts fixed windows (a
 * client can send twice its limit across a window's edge) and has no concurrency limit,
 * which is the one that bounds the work a tenant holds on the host.
 */
export interface TenantRequestLimits {
  /** SBX_TENANT_MAX_CONCURRENT_REQUESTS: requests of one tenant in flight at once. */
  maxConcurrent: number;
  /** SBX_TENANT_REQUESTS_PER_SECOND: sustained request rate of one tenant. */
  perSecond: number;
  /** SBX_TENANT_REQUEST_BURST: requests a tenant idle for a while may send at once. */
  burst: number;
}

/**
 * Generous for agents: a computer-use loop sends a few requests a second per session, and a
 * tenant may run 10 sessions (SBX_MAX_SESSIONS_PER_TENANT).
 */
export const DEFAULT_TENANT_REQUEST_LIMITS: TenantRequestLimits = { maxConcurrent: 64, perSecond: 50, burst: 200 };

export type RequestLimitName = 'concurrency' | 'rate';

/**
 * SBX_TENANT_REQUEST_LIMITS: limits of named tenants that differ from the default, as
 * `tenant=concurrent/perSecond/burst` separated by commas, e.g. `ci=256/500/1000,local=128/100/400`.
 */
export function parseTenantLimitOverrides(text: string, setting = 'SBX_TENANT_REQUEST_LIMITS'): Map<string, TenantRequestLimits> {
  const overrides = new Map<string, TenantRequestLimits>();
  for (const entry of text
    .split(',')
    .map((e) => e.trim())
    .filter(Boolean)) {
    const match = /^([a-z0-9][a-z0-9_.-]{0,62})=(\d+)\/(\d+)\/(\d+)$/.exec(entry);
    const [concurrent, perSecond, burst] = match ? [Number(match[2]), Number(match[3]), Number(match[4])] : [0, 0, 0];
    if (!match || concurrent < 1 || perSecond < 1 || burst < 1) {
      throw new Error(`${setting}: "${entry}" is not tenant=concurrent/perSecond/burst with whole numbers of at least 1 (e.g. ci=256/500/1000)`);
    }
    overrides.set(match[1] as string, { maxConcurrent: concurrent, perSecond, burst });
  }
  return overrides;
}

export class RequestLimitError extends LimitError {
  constructor(message: string, code: 'tenant_concurrency_limit' | 'tenant_rate_limit', retryAfterSeconds: number) {
    super(message, code, retryAfterSeconds);
  }
}

interface TenantState {
  limits: TenantRequestLimits;
  inFlight: number;
  tokens: number;
  /** When `tokens` was last brought up to date (ms, monotonic). */
  refilledAt: number;
}

/**
 * The counters of every tenant. One entry per tenant that has sent a request: tenants only
 * exist through API keys (or "local"), so the map is as small as the key table.
 */
export class TenantRequestGate {
  private readonly tenants = new Map<string, TenantState>();

  constructor(
    readonly limits: TenantRequestLimits,
    /** Tenants whose limits are not the default ones (SBX_TENANT_REQUEST_LIMITS). */
    private readonly overrides: ReadonlyMap<string, TenantRequestLimits> = new Map(),
    private readonly now: () => number = () => performance.now(),
  ) {
    for (const set of [limits, ...overrides.values()]) {
      for (const [name, value] of Object.entries(set)) {
        if (!Number.isFinite(value) || value <= 0) throw new Error(`tenant request limit ${name} must be a positive number, got ${value}`);
      }
    }
  }

  /** Takes a slot and a token for `tenant`, or throws a 429; call the returned function once the request is over. */
  admit(tenant: string): () => void {
    const state = this.stateOf(tenant);
    const { maxConcurrent, perSecond, burst } = state.limits;
    if (state.inFlight >= maxConcurrent) {
      throw new RequestLimitError(
        `too many requests in flight: tenant "${tenant}" has ${state.inFlight}, its limit of concurrent requests ` +
          `(${maxConcurrent}, SBX_TENANT_MAX_CONCURRENT_REQUESTS or the tenant's entry in SBX_TENANT_REQUEST_LIMITS); wait for some to finish, then retry`,
        'tenant_concurrency_limit',
        1,
      );
    }
    const now = this.now();
    state.tokens = Math.min(burst, state.tokens + ((now - state.refilledAt) / 1000) * perSecond);
    state.refilledAt = now;
    if (state.tokens < 1) {
      const retryAfter = Math.max(1, Math.ceil((1 - state.tokens) / perSecond));
      throw new RequestLimitError(
        `too many requests: tenant "${tenant}" is over its request rate limit of ${perSecond} a second, in bursts of at most ${burst} ` +
          `(SBX_TENANT_REQUESTS_PER_SECOND and SBX_TENANT_REQUEST_BURST, or the tenant's entry in SBX_TENANT_REQUEST_LIMITS); retry after ${retryAfter} s`,
        'tenant_rate_limit',
        retryAfter,
      );
    }
    state.tokens -= 1;
    state.inFlight++;
    let released = false;
    return () => {
      if (released) return;
      released = true;
      state.inFlight--;
    };
  }

  private stateOf(tenant: string): TenantState {
    let state = this.tenants.get(tenant);
    if (!state) {
      const limits = this.overrides.get(tenant) ?? this.limits;
      state = { limits, inFlight: 0, tokens: limits.burst, refilledAt: this.now() };
      this.tenants.set(tenant, state);
    }
    return state;
  }
}

/** The release of each admitted request's slot, for a route that gives it back early (an event stream). */
const heldSlots = new WeakMap<object, () => void>();

/**
 * Gives back the tenant request slot `request` holds, if it holds one (idempotent). An event
 * stream calls it once it streams: it has a cap of its own (stream-slots.ts) instead.
 */
export function releaseRequestSlot(request: FastifyRequest): void {
  heldSlots.get(request.raw)?.();
}

/**
 * The onRequest hook; install it after authentication (it needs the tenant) and before
 * anything that does work. The slot is released when the response is closed: sent, failed,
 * or abandoned by the client (the close event comes in every case, so no path leaks a slot).
 */
export function installTenantRequestLimits(app: FastifyInstance, gate: TenantRequestGate, onRefused: (limit: RequestLimitName) => void): void {
  app.addHook('onRequest', async (request, reply) => {
    if (request.tenant === '') return;
    let release: () => void;
    try {
      release = gate.admit(request.tenant);
    } catch (err) {
      // Counted, not logged on its own: the request's own log line says 429 (a flood of
      // refusals must not double the log volume).
      if (err instanceof RequestLimitError) onRefused(err.code === 'tenant_rate_limit' ? 'rate' : 'concurrency');
      throw err;
    }
    heldSlots.set(request.raw, release);
    reply.raw.once('close', release);
  });
}
