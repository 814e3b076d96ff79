import type { FsCalls, FsEntry } from './fs-calls.js';
import { MAX_LIST_ENTRIES } from './fs-calls.js';

export type FsChange = { type: 'created' | 'modified' | 'removed'; entry: FsEntry };

/** How often a watched directory is read. */
export const WATCH_INTERVAL_MS = 500;

/**
 * Watches one directory (its own entries) by reading it every WATCH_INTERVAL_MS over SFTP and
 * comparing: the guest images carry no inotify tools, and a listing over SFTP needs nothing in
 * the guest and parses nothing but SFTP's own replies. A change of size, mtime, mode or type
 * is `modified`. A directory with more than MAX_LIST_ENTRIES entries ends the watch with an
 * error rather than be compared in part.
 */
export class DirectoryWatch {
  private timer: NodeJS.Timeout | undefined;
  private known: Map<string, FsEntry> | undefined;
  private stopped = false;

  constructor(
    private readonly fs: FsCalls,
    private readonly dir: string,
    private readonly onChange: (change: FsChange) => void,
    private readonly onEnd: (error: Error) => void,
    private readonly intervalMs = WATCH_INTERVAL_MS,
  ) {}

  /** Reads the directory once (so that a missing one fails the request), then polls. */
  async start(): Promise<void> {
    this.known = await this.snapshot();
    this.schedule();
  }

  stop(): void {
    this.stopped = true;
    clearTimeout(this.timer);
  }

  private schedule(): void {
    if (this.stopped) return;
    this.timer = setTimeout(() => void this.poll(), this.intervalMs);
  }

  private async poll(): Promise<void> {
    let now: Map<string, FsEntry>;
    try {
      now = await this.snapshot();
    } catch (err) {
      if (!this.stopped) this.onEnd(err as Error);
      this.stop();
      return;
    }
    if (this.stopped) return;
    const before = this.known ?? new Map<string, FsEntry>();
    for (const [name, entry] of now) {
      const old = before.get(name);
      if (!old) this.onChange({ type: 'created', entry });
      else if (old.size !== entry.size || old.mtime !== entry.mtime || old.mode !== entry.mode || old.type !== entry.type)
        this.onChange({ type: 'modified', entry });
    }
    for (const [name, entry] of before) if (!now.has(name)) this.onChange({ type: 'removed', entry });
    this.known = now;
    this.schedule();
  }

  private async snapshot(): Promise<Map<string, FsEntry>> {
    const entries = await this.fs.readdir(this.dir, MAX_LIST_ENTRIES + 1);
    if (entries.length > MAX_LIST_ENTRIES) throw new Error(`${this.dir} has more than ${MAX_LIST_ENTRIES} entries: too many to watch`);
    return new Map(entries.map((e) => [e.name, e]));
  }
}
