/**
 * Counted slots per key (a session, a tenant), each key with its own limit. Checking and
 * taking are one synchronous step, so callers that take a slot before their first `await`
 * can never overshoot, however many arrive at once; the release a take returns is safe to
 * call from every exit path (it counts once).
 */
export class KeyedSlots {
  private readonly held = new Map<string, number>();

  constructor(private readonly limitOf: (key: string) => number) {}

  count(key: string): number {
    return this.held.get(key) ?? 0;
  }

  limit(key: string): number {
    return this.limitOf(key);
  }

  /** Whether one more slot of `key` fits now. */
  fits(key: string): boolean {
    return this.count(key) < this.limitOf(key);
  }

  /** Takes a slot (the caller checked `fits` in the same synchronous step); returns its release. */
  take(key: string): () => void {
    this.held.set(key, this.count(key) + 1);
    let released = false;
    return () => {
      if (released) return;
      released = true;
      const left = this.count(key) - 1;
      if (left > 0) this.held.set(key, left);
      else this.held.delete(key);
    };
  }
}

/**
 * Takes one slot of each (gate, key) pair, or none: the first pair that is full is returned
 * (for the caller's refusal) and nothing is taken. All in one synchronous step.
 */
export function takeAll(pairs: ReadonlyArray<readonly [KeyedSlots, string]>): { release: () => void } | { full: number } {
  const full = pairs.findIndex(([slots, key]) => !slots.fits(key));
  if (full >= 0) return { full };
  const releases = pairs.map(([slots, key]) => slots.take(key));
  return { release: () => releases.forEach((release) => release()) };
}
