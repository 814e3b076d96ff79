import type { CreateSnapshotOptions, SnapshotInfo } from './api-types.js';
import type { SandboxClient } from './index.js';

export type { CreateSnapshotOptions, SnapshotInfo } from './api-types.js';

/**
 * The tenant's snapshots (docs/snapshots.md): a running session's desktop saved, memory and
 * disk; `client.create({ snapshot: id })` starts a new session from one (a fork, with its own keys).
 */
export class Snapshots {
  constructor(private readonly client: SandboxClient) {}

  /** Snapshots a running session (it pauses for a moment and runs on); 409 snapshot_unsupported where the runtime cannot. */
  create(sessionId: string, options: CreateSnapshotOptions = {}): Promise<SnapshotInfo> {
    return this.client.json<SnapshotInfo>('POST', `/v1/sessions/${encodeURIComponent(sessionId)}/snapshots`, options);
  }

  async list(): Promise<SnapshotInfo[]> {
    return (await this.client.json<{ snapshots: SnapshotInfo[] }>('GET', '/v1/snapshots')).snapshots;
  }

  get(id: string): Promise<SnapshotInfo> {
    return this.client.json<SnapshotInfo>('GET', `/v1/snapshots/${encodeURIComponent(id)}`);
  }

  /** Deletes it and its files (sessions started from it go on). */
  delete(id: string): Promise<SnapshotInfo> {
    return this.client.json<SnapshotInfo>('DELETE', `/v1/snapshots/${encodeURIComponent(id)}`);
  }
}
