import { readdirSync, statSync } from 'node:fs';
import { mkdir, rm } from 'node:fs/promises';
import path from 'node:path';
import type { Logger } from 'pino';
import { InvalidRequestError, OrchestratorError } from '../errors.js';
import type { SnapshotSettings } from './settings.js';
import { checkSnapshotId, checkSnapshotName, checkSnapshotRoom, checkSnapshotSize, newSnapshotId, SNAPSHOT_ID_PATTERN } from './snapshot-names.js';
import type { SnapshotRecord, SnapshotStore } from './snapshot-store.js';

/** A snapshot as the API shows it. */
export interface SnapshotView {
  id: string;
  name: string | null;
  /** The session it was taken of (which may have ended since). */
  sessionId: string;
  template: string;
  runtime: string;
  /** Bytes of host disk its files hold (memory state compressed, disk layer as written). */
  bytes: number;
  createdAt: string;
}

/** What the sessions layer does for a snapshot (sessions/session-snapshots.ts): the service never sees a session itself. */
export interface SnapshotSessions {
  /** Why the runtime cannot take snapshots here (undefined: it can). */
  unavailable(): string | undefined;
  /** The tenant's running session to be snapshotted: 404 for another tenant's, 409 unless ready. */
  describe(tenant: string, sessionId: string): { template: string; runtime: string; width: number; height: number };
  /** Saves the session's memory and disk into `dir` (made, empty, root's); the session runs on. */
  snapshot(sessionId: string, dir: string): Promise<void>;
}

/** A snapshot held while a session starts from it (a delete meanwhile is a 409). */
export interface ForkSource {
  record: SnapshotRecord;
  /** Its files: the runtime's own, never a path a client named. */
  dir: string;
  release(): void;
}

export interface SnapshotsOptions {
  store: SnapshotStore;
  /** <stateDir>/snapshots. */
  dir: string;
  settings: SnapshotSettings;
  /** The runtime of this orchestrator: a snapshot of another cannot be forked here. */
  runtime: string;
  log: Logger;
}

/**
 * Snapshots (docs/snapshots.md): a running desktop's memory and disk saved to the host's disk,
 * per tenant, from which new sessions start (forks). They outlive the session that made them;
 * the tenant stored with each is its only scope. Their files live under <stateDir>/snapshots/<id>
 * (the id is ours), counted against the tenant's quota by their bytes on disk.
 */
export class Snapshots {
  private sessions: SnapshotSessions | undefined;
  /** Forks starting from each snapshot now. */
  private readonly forking = new Map<string, number>();

  constructor(private readonly opts: SnapshotsOptions) {}

  /** The sessions layer, once it exists (it is made after this service). */
  attach(sessions: SnapshotSessions): void {
    this.sessions = sessions;
  }

  async create(tenant: string, sessionId: string, body: { name?: unknown }): Promise<SnapshotView> {
    const { store, settings, log } = this.opts;
    const name = checkSnapshotName(body.name);
    const sessions = this.sessions;
    const why = sessions ? sessions.unavailable() : 'this orchestrator has no sessions';
    const about = sessions?.describe(tenant, sessionId); // 404 / 409 before anything else is said of it
    if (why !== undefined || !sessions || !about) throw new OrchestratorError('snapshot_unsupported', `sessions cannot be snapshotted here: ${why}`);
    // The quota is checked and the row inserted in one synchronous step: racing creates cannot pass it together.
    checkSnapshotRoom(store.list(tenant), settings);
    const record: SnapshotRecord = { id: newSnapshotId(), tenant, name, sessionId, ...about, bytes: 0, state: 'creating', createdAt: new Date().toISOString() };
    if (!store.insert(record)) throw new OrchestratorError('snapshot_exists', `the tenant has a snapshot named ${JSON.stringify(name)} already`);
    const dir = this.dirOf(record.id);
    const started = performance.now();
    try {
      await mkdir(this.opts.dir, { recursive: true, mode: 0o700 });
      await mkdir(dir, { mode: 0o700 });
      await sessions.snapshot(sessionId, dir);
      record.bytes = allocatedBytes(dir);
      checkSnapshotSize(
        store.list(tenant).filter((s) => s.id !== record.id),
        record.bytes,
        settings,
      );
    } catch (err) {
      await rm(dir, { recursive: true, force: true });
      store.delete(record.id);
      throw err;
    }
    store.markReady(record.id, record.bytes);
    log.info({ tenant, sessionId, snapshot: record.id, bytes: record.bytes, ms: Math.round(performance.now() - started) }, 'snapshot taken');
    return view({ ...record, state: 'ready' });
  }

  list(tenant: string): SnapshotView[] {
    return this.opts.store
      .list(tenant)
      .filter((r) => r.state === 'ready')
      .map(view);
  }

  get(tenant: string, id: string): SnapshotView {
    return view(this.record(tenant, id));
  }

  /**
   * Deletes a snapshot and its files; sessions started from it are not touched (each has its own
   * copy). The row goes first, in the same turn as the check: a create arriving while the files
   * are removed finds no snapshot (take), rather than forking from half of them. A crash
   * meanwhile leaves files without a row, which recover() removes.
   */
  async delete(tenant: string, id: string): Promise<SnapshotView> {
    const record = this.record(tenant, id);
    if ((this.forking.get(id) ?? 0) > 0)
      throw new OrchestratorError('snapshot_in_use', `snapshot ${id} is being forked now: delete it once the session has started`);
    this.opts.store.delete(id);
    await rm(this.dirOf(id), { recursive: true, force: true });
    this.opts.log.info({ tenant, snapshot: id }, 'snapshot deleted');
    return view(record);
  }

  /** The tenant's snapshot a create names, held until the session has started from it (release). */
  take(tenant: string, id: unknown): ForkSource {
    const record = this.record(tenant, checkSnapshotId(id));
    if (record.runtime !== this.opts.runtime) {
      throw new OrchestratorError(
        'snapshot_unsupported',
        `snapshot ${record.id} was taken on the ${record.runtime} runtime; this orchestrator runs ${this.opts.runtime}`,
      );
    }
    this.forking.set(record.id, (this.forking.get(record.id) ?? 0) + 1);
    let released = false;
    return {
      record,
      dir: this.dirOf(record.id),
      release: () => {
        if (released) return;
        released = true;
        const left = (this.forking.get(record.id) ?? 1) - 1;
        if (left > 0) this.forking.set(record.id, left);
        else this.forking.delete(record.id);
      },
    };
  }

  /** Start-up: what a crash left half made (a `creating` row, a directory with no row) is removed. */
  async recover(): Promise<void> {
    const { store, dir, log } = this.opts;
    await mkdir(dir, { recursive: true, mode: 0o700 });
    const known = new Set<string>();
    for (const record of store.all()) {
      if (record.state === 'ready') {
        known.add(record.id);
        continue;
      }
      await rm(this.dirOf(record.id), { recursive: true, force: true });
      store.delete(record.id);
      log.warn({ snapshot: record.id }, 'removed a snapshot an earlier run left half made');
    }
    for (const entry of readdirSync(dir)) {
      if (!known.has(entry)) await rm(path.join(dir, entry), { recursive: true, force: true });
    }
  }

  /** A ready snapshot of the tenant's, or 404 snapshot_not_found (another tenant's is the same 404). */
  private record(tenant: string, id: string): SnapshotRecord {
    const record = SNAPSHOT_ID_PATTERN.test(id) ? this.opts.store.get(tenant, id) : undefined;
    if (!record || record.state !== 'ready') throw new OrchestratorError('snapshot_not_found', `no snapshot ${JSON.stringify(id)}`);
    return record;
  }

  private dirOf(id: string): string {
    if (!SNAPSHOT_ID_PATTERN.test(id)) throw new InvalidRequestError(`not a snapshot id: ${JSON.stringify(id)}`);
    return path.join(this.opts.dir, id);
  }
}

function view(r: SnapshotRecord): SnapshotView {
  return { id: r.id, name: r.name, sessionId: r.sessionId, template: r.template, runtime: r.runtime, bytes: r.bytes, createdAt: r.createdAt };
}

/** The bytes of disk a directory's files take (sparse files count what they hold). */
function allocatedBytes(dir: string): number {
  let total = 0;
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const file = path.join(dir, entry.name);
    if (entry.isFile()) total += statSync(file).blocks * 512;
    else if (entry.isDirectory()) total += allocatedBytes(file); // a container's criu images
  }
  return total;
}
