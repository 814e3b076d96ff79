import { setTimeout as sleep } from 'node:timers/promises';
import type { Logger } from 'pino';
import type { Metrics } from '../../metrics/metrics.js';
import type { Session } from '../session.js';
import type { WarmHelpers } from '../../computer/warm-helpers.js';

/** What a pooled sandbox must match for a request to use it (all else is decided at claim). */
export interface ScreenShape {
  width: number;
  height: number;
}

/** A booted sandbox waiting in the pool: ready, with no connection open and the pool's key. */
export interface PooledSandbox {
  session: Session;
  /** The guest's host key as generated at boot: the claim's connection pins it again. */
  hostPublicKey: string;
  /** Its desktop helpers' launcher (computer/warm-helpers.ts), if it started: the claim forks them from it. */
  warmHelpers?: WarmHelpers;
}

/** How the pool makes and unmakes sandboxes; the session manager provides both. */
export interface WarmPoolHooks {
  /** Boots one sandbox for the pool. On failure it has released what it took, then throws. */
  boot(shape: ScreenShape): Promise<PooledSandbox>;
  /** Destroys a pooled sandbox no one claimed. Never throws. */
  release(pooled: PooledSandbox, reason: string): Promise<void>;
}

export interface WarmPoolOptions {
  /** The template of every sandbox in this pool (one pool per template). */
  template: string;
  size: number;
  shape: ScreenShape;
  hooks: WarmPoolHooks;
  metrics: Metrics;
  log: Logger;
  /** Retry delays after a failed refill: doubling from minMs up to maxMs. */
  backoff?: { minMs: number; maxMs: number };
  /** How far demand may grow the pool (a create finding it empty adds one); at most `size` (fixed) when lower. */
  max?: number;
  /** A grown pool not taken from for this long goes down by one, and again after as long, to `size` (default 60 s). */
  idleShrinkMs?: number;
}

export interface WarmPoolStatus {
  template: string;
  target: number;
  shape: ScreenShape;
  /** Ids of the sandboxes ready to be claimed, oldest first. */
  ready: string[];
  booting: number;
}

const DEFAULT_BACKOFF = { minMs: 1_000, maxMs: 60_000 };
const DEFAULT_IDLE_SHRINK_MS = 60_000;

/**
 * A pool of booted sandboxes of one image and one screen shape, so that a create can skip
 * the boot. It is refilled in the background, one sandbox at a time (a boot is CPU-bound: two
 * at once would slow each other and every live session); a failed refill is logged, counted
 * and retried with exponential backoff, and never reaches a client. Taking a sandbox is a
 * synchronous pop: no lock, nothing waits on the pool, and two creates can never get the same
 * sandbox. Pooled sandboxes are not sessions: they are not listed, have no idle timeout and
 * do not count in sandbox_sessions_active (they do hold an address block and memory).
 */
export class WarmPool {
  private target: number;
  private readonly idle: PooledSandbox[] = [];
  private booting = 0;
  private filling: Promise<void> | undefined;
  private stopped = false;
  private failures = 0;
  private readonly abort = new AbortController();
  private readonly backoff: { minMs: number; maxMs: number };
  /** The configured size (resize sets it): demand grows the target from here up to max, idleness brings it back. */
  private floor: number;
  private lastTakeAt = performance.now();
  private readonly shrinkTimer: NodeJS.Timeout | undefined;

  constructor(private readonly opts: WarmPoolOptions) {
    if (!Number.isInteger(opts.size) || opts.size < 0) throw new Error(`warm pool size must be a whole number >= 0, got ${opts.size}`);
    this.target = opts.size;
    this.floor = opts.size;
    this.backoff = opts.backoff ?? DEFAULT_BACKOFF;
    const idleShrinkMs = opts.idleShrinkMs ?? DEFAULT_IDLE_SHRINK_MS;
    if ((opts.max ?? 0) > opts.size) {
      this.shrinkTimer = setInterval(() => this.shrinkIfIdle(idleShrinkMs), Math.max(10, idleShrinkMs / 4));
      this.shrinkTimer.unref();
    }
    this.report();
  }

  /** A grown pool whose sandboxes were not taken for idleShrinkMs gives one back (and waits as long again). */
  private shrinkIfIdle(idleShrinkMs: number): void {
    if (this.stopped || this.target <= this.floor || performance.now() - this.lastTakeAt < idleShrinkMs) return;
    this.target--;
    this.lastTakeAt = performance.now();
    const extra = this.idle.splice(this.target);
    this.report();
    for (const p of extra) void this.opts.hooks.release(p, 'demand fell: the warm pool shrinks');
  }

  /** Starts filling the pool in the background. */
  start(): void {
    this.kick();
  }

  status(): WarmPoolStatus {
    return {
      template: this.opts.template,
      target: this.target,
      shape: { ...this.opts.shape },
      ready: this.idle.map((p) => p.session.id),
      booting: this.booting,
    };
  }

  /**
   * A ready sandbox of this shape, taken out of the pool (the caller owns it from now on),
   * or undefined: the pool is empty, off, stopping, or its sandboxes have another shape.
   * The caller calls refill() once its claim has settled: a boot started at once would take
   * the CPU from the very claim the pool exists to make fast.
   */
  take(shape: ScreenShape): PooledSandbox | undefined {
    if (this.stopped || shape.width !== this.opts.shape.width || shape.height !== this.opts.shape.height) return undefined;
    this.lastTakeAt = performance.now();
    // Demand: a create that finds the pool empty grows it by one, within its bounds.
    if (this.idle.length === 0 && this.target < (this.opts.max ?? 0)) {
      this.target++;
      this.kick(); // no claim to wait for: this create boots cold
    }
    let pooled = this.idle.shift();
    // One that died while waiting is dropped and released here (its exit watcher only
    // releases those still in the pool).
    while (pooled && !pooled.session.sandbox?.isAlive()) {
      void this.opts.hooks.release(pooled, 'stopped while pooled');
      pooled = this.idle.shift();
    }
    this.report();
    return pooled;
  }

  /** Boots replacements for the sandboxes taken, in the background. */
  refill(): void {
    this.kick();
  }

  /** Changes the number of sandboxes kept ready: grows in the background, shrinks at once. */
  async resize(size: number): Promise<void> {
    if (!Number.isInteger(size) || size < 0) throw new Error(`warm pool size must be a whole number >= 0, got ${size}`);
    this.target = size;
    this.floor = size;
    const extra = this.idle.splice(size);
    this.report();
    this.kick();
    await Promise.all(extra.map((p) => this.opts.hooks.release(p, 'the warm pool was made smaller')));
  }

  /** Stops refilling, waits for a boot in flight and destroys every pooled sandbox. */
  async stop(): Promise<void> {
    this.stopped = true;
    clearInterval(this.shrinkTimer);
    this.abort.abort();
    await this.filling;
    const all = this.idle.splice(0);
    this.report();
    await Promise.all(all.map((p) => this.opts.hooks.release(p, 'the orchestrator is shutting down')));
  }

  private kick(): void {
    if (this.stopped || this.filling || this.idle.length >= this.target) return;
    this.filling = this.fill().finally(() => {
      this.filling = undefined;
      // A resize or a take may have happened during the last await.
      this.kick();
    });
  }

  private async fill(): Promise<void> {
    while (!this.stopped && this.idle.length < this.target) {
      this.booting++;
      this.report();
      let pooled: PooledSandbox | undefined;
      try {
        pooled = await this.opts.hooks.boot(this.opts.shape);
        this.failures = 0;
      } catch (err) {
        this.failures++;
        const delayMs = Math.min(this.backoff.maxMs, this.backoff.minMs * 2 ** (this.failures - 1));
        this.opts.metrics.warmPoolRefillFailures.inc();
        this.opts.log.warn({ err, failures: this.failures, retryInMs: delayMs }, 'warm pool: booting a sandbox failed; retrying later');
        this.booting--;
        this.report();
        await sleep(delayMs, undefined, { signal: this.abort.signal }).catch(() => undefined);
        continue;
      }
      this.booting--;
      if (this.stopped || this.idle.length >= this.target) {
        this.report();
        await this.opts.hooks.release(pooled, 'the warm pool no longer needs it');
        continue;
      }
      this.add(pooled);
    }
  }

  private add(pooled: PooledSandbox): void {
    this.idle.push(pooled);
    this.report();
    this.opts.log.debug({ sandbox: pooled.session.id, ready: this.idle.length }, 'warm pool: sandbox ready');
    // A pooled sandbox that dies while it waits is released and replaced; once claimed, the
    // session watches it instead.
    void pooled.session.sandbox?.exited.then((info) => {
      const index = this.idle.indexOf(pooled);
      if (index < 0) return;
      this.idle.splice(index, 1);
      this.report();
      this.opts.log.warn({ sandbox: pooled.session.id, reason: info.reason }, 'warm pool: a pooled sandbox stopped; replacing it');
      void this.opts.hooks.release(pooled, `stopped while pooled: ${info.reason}`).then(() => this.kick());
    });
  }

  private report(): void {
    const { template } = this.opts;
    this.opts.metrics.warmPoolSandboxes.set({ state: 'ready', template }, this.idle.length);
    this.opts.metrics.warmPoolSandboxes.set({ state: 'booting', template }, this.booting);
  }
}
