import { serverSentEvents } from './event-stream.js';
import type { SandboxClient } from './index.js';

/** One entry of a listing, a stat, or a watch event. */
export interface FsEntry {
  name: string;
  path: string;
  type: 'file' | 'dir' | 'symlink' | 'other';
  size: number;
  /** Permission bits in octal, e.g. "0644". */
  mode: string;
  mtime: string;
  target?: string;
}

export type FsChange = { type: 'created' | 'modified' | 'removed'; entry: FsEntry };

/** The filesystem calls of a sandbox (docs/api.md#filesystem), as the guest user. */
export class SandboxFs {
  constructor(
    private readonly client: SandboxClient,
    private readonly id: string,
  ) {}

  private url(call: string, query?: Record<string, string>): string {
    return `/v1/sessions/${encodeURIComponent(this.id)}/fs/${call}${query ? `?${new URLSearchParams(query)}` : ''}`;
  }

  /** A directory's entries, `depth` levels down (1-5, default 1); `truncated` past the server's cap. */
  list(path: string, options: { depth?: number } = {}): Promise<{ path: string; entries: FsEntry[]; truncated: boolean }> {
    return this.client.json('GET', this.url('list', { path, ...(options.depth ? { depth: String(options.depth) } : {}) }));
  }

  stat(path: string): Promise<FsEntry> {
    return this.client.json('GET', this.url('stat', { path }));
  }

  /** mkdir -p; `mode` in octal text (default "0755"). */
  mkdir(path: string, options: { mode?: string } = {}): Promise<FsEntry> {
    return this.client.json('POST', this.url('mkdir'), { path, ...options });
  }

  move(from: string, to: string, options: { overwrite?: boolean } = {}): Promise<FsEntry> {
    return this.client.json('POST', this.url('move'), { from, to, ...options });
  }

  async remove(path: string, options: { recursive?: boolean } = {}): Promise<void> {
    await this.client.send(this.url('remove'), { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ path, ...options }) });
  }

  /** Changes to a directory's entries until `signal` aborts (or the directory goes). */
  async *watch(path: string, options: { signal?: AbortSignal } = {}): AsyncGenerator<FsChange> {
    const response = await this.client.send(this.url('watch', { path }), { method: 'GET', ...(options.signal ? { signal: options.signal } : {}) });
    try {
      for await (const event of serverSentEvents(response.body)) {
        if (event.event === 'created' || event.event === 'modified' || event.event === 'removed')
          yield { type: event.event, entry: JSON.parse(event.data) as FsEntry };
        else if (event.event === 'error') throw new Error((JSON.parse(event.data) as { message: string }).message);
      }
    } catch (err) {
      if (options.signal?.aborted) return;
      throw err;
    }
  }
}
