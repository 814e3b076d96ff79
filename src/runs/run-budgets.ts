import { InvalidRequestError, LimitError } from '../errors.js';
import type { RunSettings, RunTenantLimits } from './settings.js';

/** A tenant at its concurrent runs, or with too little of its day's budget left for this run. */
export class RunLimitError extends LimitError {
  constructor(message: string, code: 'tenant_run_limit' | 'tenant_run_budget', retryAfterSeconds: number) {
    super(message, code, retryAfterSeconds);
  }
}

/** What a run takes of its tenant's budget while it runs; settled with what it used at its end. */
export interface RunReservation {
  readonly maxTokens: number;
  readonly maxSeconds: number;
  /** The run ended having used this much (counted once; later calls do nothing). */
  settle(tokens: number, seconds: number): void;
}

/** One tenant's day: what ended runs used, and what running runs may still use. */
interface Ledger {
  day: string;
  usedTokens: number;
  usedSeconds: number;
  reservedTokens: number;
  reservedSeconds: number;
  running: number;
}

/** What runs already used today, per tenant (the store's runs of the day, at start). */
export interface UsedToday {
  tenant: string;
  tokens: number;
  seconds: number;
}

const utcDay = (ms: number): string => new Date(ms).toISOString().slice(0, 10);

/**
 * Per-tenant limits of the built-in loop: the models it may ask for, its runs at once, and
 * its tokens and run seconds per UTC day. A run reserves its whole `maxTokens` and
 * `maxSeconds` when it starts, in the same synchronous step as the check (before a sandbox
 * is awaited), so concurrent starts cannot overspend; at its end the reservation becomes
 * what it used (a step can pass maxTokens by one model answer: that is counted too).
 */
export class RunBudgets {
  private readonly ledgers = new Map<string, Ledger>();

  constructor(
    private readonly settings: RunSettings,
    usedToday: readonly UsedToday[] = [],
    private readonly now: () => number = () => Date.now(),
  ) {
    for (const { tenant, tokens, seconds } of usedToday) {
      const ledger = this.ledgerOf(tenant);
      ledger.usedTokens += tokens;
      ledger.usedSeconds += seconds;
    }
  }

  /** The tenant's models; 400 naming the field for another one. */
  checkModel(tenant: string, model: string, given: boolean): void {
    const allowed = this.settings.tenantModels.get(tenant) ?? this.settings.models;
    if (allowed.some((m) => model === m || (model.startsWith(`${m}-`) && /^\d{8}$/.test(model.slice(m.length + 1))))) return;
    throw new InvalidRequestError(
      `model: ${given ? `"${model}"` : `the default "${model}"`} is not allowed for tenant "${tenant}"; allowed: ${allowed.join(', ')} ` +
        '(or one of them with a date, e.g. -20251001; the operator sets the list: SBX_RUN_MODELS, SBX_TENANT_RUN_MODELS)',
    );
  }

  /**
   * Reserves a run's budget, or throws: 400 when `maxTokens` / `maxSeconds` alone are over the
   * tenant's daily budget, 429 when it runs `maxConcurrentRuns` already or the day's budget
   * left (after what running runs reserved) is too small. Synchronous: check and take are one step.
   */
  reserve(tenant: string, asked: { maxTokens?: number; maxSeconds?: number }, defaults: { maxTokens: number; maxSeconds: number }): RunReservation {
    const limits = this.limitsOf(tenant);
    const maxTokens = asked.maxTokens ?? Math.min(defaults.maxTokens, limits.tokensPerDay);
    const maxSeconds = asked.maxSeconds ?? Math.min(defaults.maxSeconds, limits.secondsPerDay);
    if (maxTokens > limits.tokensPerDay) {
      throw new InvalidRequestError(
        `maxTokens must be at most ${limits.tokensPerDay}, tenant "${tenant}"'s daily token budget (SBX_TENANT_RUN_TOKENS_PER_DAY)`,
      );
    }
    if (maxSeconds > limits.secondsPerDay) {
      throw new InvalidRequestError(`maxSeconds must be at most ${limits.secondsPerDay}, tenant "${tenant}"'s daily run time (SBX_TENANT_RUN_SECONDS_PER_DAY)`);
    }
    const ledger = this.ledgerOf(tenant);
    if (ledger.running >= limits.maxConcurrentRuns) {
      throw new RunLimitError(
        `too many runs: tenant "${tenant}" has ${ledger.running} running, its limit (SBX_TENANT_MAX_RUNS or SBX_TENANT_RUN_LIMITS); wait for one to end or stop one, then retry`,
        'tenant_run_limit',
        5,
      );
    }
    const tokensLeft = limits.tokensPerDay - ledger.usedTokens - ledger.reservedTokens;
    const secondsLeft = limits.secondsPerDay - ledger.usedSeconds - ledger.reservedSeconds;
    if (maxTokens > tokensLeft || maxSeconds > secondsLeft) {
      const what =
        maxTokens > tokensLeft
          ? `maxTokens ${maxTokens} is more than the ${Math.max(0, tokensLeft)} tokens left of its ${limits.tokensPerDay} today (${ledger.usedTokens} used, ${ledger.reservedTokens} reserved by running runs)`
          : `maxSeconds ${maxSeconds} is more than the ${Math.max(0, secondsLeft)} seconds left of its ${limits.secondsPerDay} today (${ledger.usedSeconds} used, ${ledger.reservedSeconds} reserved by running runs)`;
      // Running runs give back what they did not use when they end; otherwise the day must pass.
      const retryAfter = ledger.running > 0 ? 60 : Math.max(1, Math.ceil((Date.parse(`${ledger.day}T00:00:00Z`) + 86_400_000 - this.now()) / 1000));
      throw new RunLimitError(
        `run budget exceeded: tenant "${tenant}"'s ${what}; ask for less, or retry once running runs end or after 00:00 UTC`,
        'tenant_run_budget',
        retryAfter,
      );
    }
    ledger.running++;
    ledger.reservedTokens += maxTokens;
    ledger.reservedSeconds += maxSeconds;
    let settled = false;
    return {
      maxTokens,
      maxSeconds,
      settle: (tokens, seconds) => {
        if (settled) return;
        settled = true;
        const current = this.ledgerOf(tenant);
        current.running--;
        current.reservedTokens -= maxTokens;
        current.reservedSeconds -= maxSeconds;
        current.usedTokens += tokens;
        current.usedSeconds += Math.ceil(seconds);
      },
    };
  }

  /** What the tenant used and reserved today (tests, and the operator's questions). */
  ledger(tenant: string): Readonly<Ledger> {
    return { ...this.ledgerOf(tenant) };
  }

  private limitsOf(tenant: string): RunTenantLimits {
    return this.settings.tenantLimits.get(tenant) ?? this.settings.limits;
  }

  /** The tenant's ledger, a new day's if the day changed (reservations of running runs carry over). */
  private ledgerOf(tenant: string): Ledger {
    const day = utcDay(this.now());
    let ledger = this.ledgers.get(tenant);
    if (!ledger) {
      ledger = { day, usedTokens: 0, usedSeconds: 0, reservedTokens: 0, reservedSeconds: 0, running: 0 };
      this.ledgers.set(tenant, ledger);
    } else if (ledger.day !== day) {
      Object.assign(ledger, { day, usedTokens: 0, usedSeconds: 0 });
    }
    return ledger;
  }
}
