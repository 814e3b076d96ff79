/**
 * A list of releases owned by one sandbox. Each resource's release is pushed the moment the
 * resource is taken; `run()` releases them last-in-first-out, once, and joins their errors.
 * A failed creation and a destroy run the same stack, so a half-made sandbox cannot leak.
 * (After e2b-dev/infra's cleanup.go and firecracker-go-sdk's handler lists.)
 */
export type Release = () => Promise<void> | void;

interface Entry {
  name: string;
  release: Release;
}

export class CleanupStack {
  private entries: Entry[] = [];
  private ran = false;
  private running: Promise<void> | undefined;

  /** Registers a release. If the stack already ran, the release runs at once. */
  async push(name: string, release: Release): Promise<void> {
    if (this.ran) {
      await release();
      return;
    }
    this.entries.push({ name, release });
  }

  /**
   * Registers the release of a resource that stands in for an earlier one of the same name (a
   * resume's new connection, desktop or VM process): the earlier release runs now and the new
   * one takes its place in the order. A session paused and resumed a thousand times holds one
   * entry, not a thousand closures over dead connections and their buffers.
   */
  async replace(name: string, release: Release): Promise<void> {
    const at = this.entries.findIndex((e) => e.name === name);
    if (this.ran || at < 0) return this.push(name, release);
    const earlier = this.entries[at] as Entry;
    this.entries[at] = { name, release };
    await earlier.release();
  }

  /** Names of the releases still pending, newest last (for logs and tests). */
  pending(): string[] {
    return this.entries.map((e) => e.name);
  }

  /**
   * Runs every release, newest first, even when some fail; throws an AggregateError naming
   * the failed ones. Calling it again returns the first run's outcome: releases run once.
   */
  run(): Promise<void> {
    this.running ??= this.runOnce();
    return this.running;
  }

  private async runOnce(): Promise<void> {
    this.ran = true;
    const errors: Error[] = [];
    while (this.entries.length > 0) {
      const entry = this.entries.pop() as Entry;
      try {
        await entry.release();
      } catch (err) {
        const cause = err instanceof Error ? err : new Error(String(err));
        errors.push(new Error(`release ${entry.name}: ${cause.message}`, { cause }));
      }
    }
    if (errors.length > 0) {
      throw new AggregateError(errors, errors.map((e) => e.message).join('; '));
    }
  }
}
