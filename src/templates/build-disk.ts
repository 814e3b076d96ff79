import { statfs } from 'node:fs/promises';

/**
 * How much of the host's disk a template build may take. A build step runs anyone's code
 * (a base image's, a template's `run`), writing through its idmapped view onto the images
 * directory's filesystem, which live sessions, recordings and snapshots share: a step that
 * writes without end would fill it for all of them. So the filesystem's free space is read
 * when the build opens and watched while each step runs; a build that has taken more than
 * its budget (the operator's limit, and never so much that less than the reserve is left)
 * has its step killed and fails, and its tree is removed with it.
 *
 * What it is not: a quota. It reads the filesystem's free space, so whatever else writes
 * meanwhile counts against the build too, and a step that allocates at once (fallocate)
 * holds the space until the next reading, WATCH_INTERVAL_MS at most, before it is killed.
 */
export const WATCH_INTERVAL_MS = 250;
/** Left free for everything else on the filesystem whatever the build's limit: 5 % of it, at least 1 GiB. */
const RESERVE_SHARE = 0.05;
const RESERVE_MIN_BYTES = 1024 ** 3;

export class BuildDiskBudget {
  private constructor(
    private readonly dir: string,
    private readonly freeAtStart: number,
    /** Bytes the build may take from the filesystem's free space. */
    readonly budgetBytes: number,
    readonly limitBytes: number,
  ) {}

  /** The budget of a build whose files live in `dir`: `limitBytes`, or less if the filesystem has less to spare. */
  static async start(dir: string, limitBytes: number): Promise<BuildDiskBudget> {
    const fs = await statfs(dir);
    const free = fs.bavail * fs.bsize;
    const reserve = Math.max(RESERVE_MIN_BYTES, fs.blocks * fs.bsize * RESERVE_SHARE);
    return new BuildDiskBudget(dir, free, Math.max(0, Math.min(limitBytes, free - reserve)), limitBytes);
  }

  /** Bytes of the filesystem's free space gone since the build opened. */
  async taken(): Promise<number> {
    const fs = await statfs(this.dir);
    return this.freeAtStart - fs.bavail * fs.bsize;
  }

  async exceeded(): Promise<boolean> {
    return (await this.taken()) > this.budgetBytes;
  }

  /** Whether `more` bytes would still fit the budget (a step about to write a known size, such as the VM disk). */
  async fits(more: number): Promise<boolean> {
    return (await this.taken()) + more <= this.budgetBytes;
  }

  describe(): string {
    const mib = (bytes: number) => `${Math.round(bytes / 1024 ** 2)} MiB`;
    return this.budgetBytes < this.limitBytes
      ? `${mib(this.budgetBytes)} (what the images directory's filesystem can spare, keeping 5 % of it or 1 GiB free)`
      : `${mib(this.budgetBytes)} (--max-disk-mib, SBX_TEMPLATE_BUILD_MAX_DISK_MIB)`;
  }
}
