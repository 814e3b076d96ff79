import type { Logger } from 'pino';
import { NetworkPolicyUnavailableError } from '../../errors.js';
import type { NetworkPolicy } from './network-policy.js';

/** A create while the policy is being put back: retry after this long (repairs take milliseconds). */
export const POLICY_RETRY_AFTER_SECONDS = 2;

export interface PolicyGuardOptions {
  /** How often the table is compared with what was installed (SBX_NETWORK_POLICY_CHECK_MS). */
  intervalMs: number;
  /** Counts each repair (sandbox_network_policy_repairs_total). */
  onRepair: () => void;
  log: Logger;
}

/**
 * Keeps the network policy in force: something else on the host (an `nft flush ruleset`, a
 * firewall manager reloading, an operator) may delete or change our table at any time, and
 * every sandbox would then be unfenced. Every `intervalMs`, and before every create, the
 * host's own networks are read again and any change put in the table
 * (NetworkPolicy.refreshHostNetworks), then the table is compared with what we installed
 * and admitted (NetworkPolicy.drift); a
 * difference is logged at error, the table is put back whole with every live session's
 * entries, and counted. Until it is back, creates are refused with a 503 and Retry-After:
 * a sandbox is never started on a host whose fence is down.
 */
export class PolicyGuard {
  private timer: NodeJS.Timeout | undefined;
  private inForce = true;
  private lastDrift: string | undefined;
  /** The check running now. */
  private running: Promise<boolean> | undefined;
  /** The one check to run after it. */
  private queued: Promise<boolean> | undefined;
  /**
   * Awaited between finding drift and repairing it. Tests hold it to look into the window
   * where the policy is known broken (creates must be refused); nothing else sets it.
   */
  beforeRepair: (() => Promise<void>) | undefined;

  constructor(
    private readonly policy: NetworkPolicy,
    private readonly opts: PolicyGuardOptions,
  ) {}

  start(): void {
    this.timer ??= setInterval(() => void this.check(), this.opts.intervalMs);
    this.timer.unref();
  }

  stop(): void {
    if (this.timer) clearInterval(this.timer);
    this.timer = undefined;
  }

  /** Is the policy known to be as installed (as of the last check)? */
  get healthy(): boolean {
    return this.inForce;
  }

  /**
   * For a create: throws a 503 if the policy is not in force now (the check runs first, so
   * a table deleted a moment ago is caught here, not a few seconds later by the timer).
   */
  async assertInForce(): Promise<void> {
    // A check that found the table changed refuses this create even when it has put the
    // table back by now: the create came while the policy was down.
    const wasInForce = this.inForce && (await this.check());
    if (!wasInForce) {
      throw new NetworkPolicyUnavailableError(
        POLICY_RETRY_AFTER_SECONDS,
        `the guest network policy (nftables table ${this.policy.table}) was changed or removed on this host (${this.lastDrift ?? 'unknown change'}) ` +
          'and is being put back; no session is created until it is: retry shortly',
      );
    }
  }

  /**
   * Compares, and repairs on a difference; resolves to whether the policy was found in force. A check asked for while one runs waits for one
   * that starts after it (a create must not pass on the verdict of a check that began
   * before the create came); everyone asking meanwhile shares that next one. Never throws:
   * a failure is logged, the policy stays "not in force", and the next check tries again.
   */
  check(): Promise<boolean> {
    if (!this.running) return this.launch();
    this.queued ??= this.running.then(() => {
      this.queued = undefined;
      return this.launch();
    });
    return this.queued;
  }

  private launch(): Promise<boolean> {
    const check: Promise<boolean> = this.checkOnce().finally(() => {
      if (this.running === check) this.running = undefined;
    });
    this.running = check;
    return check;
  }

  /** True if the policy was found as installed; false if it was not (repaired or not since). */
  private async checkOnce(): Promise<boolean> {
    try {
      await this.policy.refreshHostNetworks();
      const drift = await this.policy.drift();
      if (drift === undefined) {
        this.inForce = true;
        return true;
      }
      this.inForce = false;
      this.lastDrift = drift;
      this.opts.log.error(
        { table: this.policy.table, drift },
        'the guest network policy was changed or removed outside the orchestrator: putting it back; creates are refused until it is',
      );
      await this.beforeRepair?.();
      await this.policy.reinstall();
      this.opts.onRepair();
      this.inForce = true;
      this.opts.log.error({ table: this.policy.table, drift }, 'the guest network policy is back in force');
    } catch (err) {
      this.inForce = false;
      this.lastDrift ??= 'the check itself failed';
      this.opts.log.error({ err, table: this.policy.table }, 'could not check or repair the guest network policy; creates are refused');
    }
    return false;
  }
}
