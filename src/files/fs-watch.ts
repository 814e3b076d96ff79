import type { FsCalls, FsEntry } from './fs-calls.js';
import { MAX_LIST_ENTRIES } from './fs-calls.js';
import type { WatchTrigger } from './fs-watch-trigger.js';

export type FsChange = { type: 'created' | 'modified' | 'removed'; entry: FsEntry };

/** How often a watched directory is read when nothing tells the watch of changes. */
export const WATCH_INTERVAL_MS = 500;
/** With the guest's inotify telling it of changes: a read this long after the first one it hears of, and a safety read this often. */
export const WATCH_EVENT_DELAY_MS = 50;
export const WATCH_SAFETY_INTERVAL_MS = 5_000;

/** Starts a trigger that calls `onEvent` on every change the guest reports (fs-watch-trigger.ts); undefined: none, poll. */
export type TriggerSource = (onEvent: () => void, onEnd: () => void) => Promise<WatchTrigger | undefined>;

/**
 * Watches one directory (its own entries) by reading it over SFTP and comparing: a listing
 * over SFTP parses nothing but SFTP's own replies. When is told by the guest's inotify where
 * the image has inotifywait (`trigger`): a read WATCH_EVENT_DELAY_MS after the first event of a
 * burst (events only say "look again": nothing of their text is used), and one every
 * WATCH_SAFETY_INTERVAL_MS; otherwise every WATCH_INTERVAL_MS. A change of size, mtime, mode
 * or type is `modified`. A directory with more than MAX_LIST_ENTRIES entries ends the watch
 * with an error rather than be compared in part.
 */
export class DirectoryWatch {
  private timer: NodeJS.Timeout | undefined;
  private known: Map<string, FsEntry> | undefined;
  private stopped = false;
  private trigger: WatchTrigger | undefined;
  private reading = false;
  private readAgain = false;
  /** A read WATCH_EVENT_DELAY_MS after an event is pending: later events do not put it off. */
  private soon = false;

  constructor(
    private readonly fs: FsCalls,
    private readonly dir: string,
    private readonly onChange: (change: FsChange) => void,
    private readonly onEnd: (error: Error) => void,
    private readonly intervalMs = WATCH_INTERVAL_MS,
    private readonly triggerSource?: TriggerSource,
  ) {}

  /** Reads the directory once (so that a missing one fails the request), then listens or polls. */
  async start(): Promise<void> {
    this.known = await this.snapshot();
    this.trigger = await this.triggerSource?.(
      () => this.heard(),
      () => {
        // inotifywait went away (the guest killed it): back to polling.
        this.trigger = undefined;
        this.heard();
      },
    );
    if (this.stopped) this.trigger?.stop();
    this.schedule();
  }

  /** Whether the guest's inotify tells this watch of changes (else it polls). */
  get listening(): boolean {
    return this.trigger !== undefined;
  }

  stop(): void {
    this.stopped = true;
    clearTimeout(this.timer);
    this.trigger?.stop();
  }

  private schedule(delayMs = this.trigger ? WATCH_SAFETY_INTERVAL_MS : this.intervalMs): void {
    if (this.stopped) return;
    clearTimeout(this.timer);
    this.soon = delayMs === WATCH_EVENT_DELAY_MS;
    this.timer = setTimeout(() => void this.poll(), delayMs);
  }

  /** An event: one read soon, however many events come meanwhile. */
  private heard(): void {
    if (this.stopped) return;
    if (this.reading) this.readAgain = true;
    else if (!this.soon) this.schedule(WATCH_EVENT_DELAY_MS);
  }

  private async poll(): Promise<void> {
    this.soon = false;
    this.reading = true;
    this.readAgain = false;
    try {
      await this.compare();
    } finally {
      this.reading = false;
    }
    if (this.readAgain) this.schedule(WATCH_EVENT_DELAY_MS);
  }

  private async compare(): Promise<void> {
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
