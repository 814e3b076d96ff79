/**
 * ClusterStore on PostgreSQL (issue 22; docs/cluster.md "State in PostgreSQL"). One object
 * per process (gateway or node), holding a small pool; every method is one statement or one
 * short transaction, bounded in time (db.ts), and fails with ClusterStateUnavailableError
 * (503, `cluster_state_unavailable`) when the database cannot be reached, recovering by
 * itself once it can: the pool makes new connections as needed, nothing is recreated.
 */
import type { ApiKeyRecord } from '../../api/auth/key-store.js';
import type { PlacementRequest } from '../placement.js';
import type {
  ClusterStore,
  DirectoryEntry,
  HeartbeatAnswer,
  NodeRemoval,
  NodeRecord,
  NodeReport,
  PlacementLimits,
  PlacementOutcome,
  VolumeEntry,
  VolumeRequest,
  VolumeReservation,
} from './cluster-store.js';
import { Db } from './db.js';
import { Directory } from './directory.js';
import { Keys } from './api-keys.js';
import { migrate } from './migrations.js';
import { NodeRegistry } from './node-registry.js';
import { PlacementTx, type PlacementTxOptions } from './placement-tx.js';
import { VolumeDirectory } from './volume-directory.js';

export interface PgClusterStoreSettings {
  /** postgres://... (SBX_CLUSTER_DB_URL, read by the entry points). */
  readonly url: string;
  /** The bound on connecting and on each statement (ms): a stopped database costs a caller about this. 2000 by default. */
  readonly timeoutMs?: number;
  /** A heartbeat older than this (ms) is not fresh: no placement there, and the name may be taken over. 10000 by default. */
  readonly staleMs?: number;
  readonly maxConnections?: number;
  /** Placement's K, warm bonus, random source; how many full nodes a create may meet under the lock. */
  readonly placement?: PlacementTxOptions;
  /** An idle connection failed (the database restarted): logged by the caller, never thrown. */
  readonly onIdleError?: (error: Error) => void;
}

export const DEFAULT_STALE_MS = 10_000;

export class PgClusterStore implements ClusterStore {
  private readonly db: Db;
  private readonly nodes: NodeRegistry;
  private readonly placement: PlacementTx;
  private readonly directory: Directory;
  private readonly keys: Keys;
  private readonly volumes: VolumeDirectory;

  constructor(settings: PgClusterStoreSettings) {
    const staleMs = settings.staleMs ?? DEFAULT_STALE_MS;
    this.db = new Db({
      url: settings.url,
      ...(settings.timeoutMs !== undefined ? { timeoutMs: settings.timeoutMs } : {}),
      ...(settings.maxConnections !== undefined ? { maxConnections: settings.maxConnections } : {}),
      ...(settings.onIdleError ? { onIdleError: settings.onIdleError } : {}),
    });
    this.nodes = new NodeRegistry(this.db, staleMs);
    this.placement = new PlacementTx(this.db, staleMs, settings.placement);
    this.directory = new Directory(this.db);
    this.keys = new Keys(this.db);
    this.volumes = new VolumeDirectory(this.db, staleMs);
  }

  async migrate(): Promise<void> {
    await migrate(this.db);
  }

  async ping(): Promise<boolean> {
    try {
      await this.db.query('ping', 'SELECT 1');
      return true;
    } catch {
      return false;
    }
  }

  close(): Promise<void> {
    return this.db.close();
  }

  registerNode(name: string, instance: string, report: NodeReport): Promise<void> {
    return this.nodes.register(name, instance, report);
  }
  heartbeat(name: string, instance: string, report: NodeReport): Promise<HeartbeatAnswer> {
    return this.nodes.heartbeat(name, instance, report);
  }
  markLostNodes(staleMs: number, now?: Date): Promise<string[]> {
    return this.nodes.markLost(staleMs, now);
  }
  listNodes(): Promise<NodeRecord[]> {
    return this.nodes.list();
  }
  getNode(name: string): Promise<NodeRecord | undefined> {
    return this.nodes.get(name);
  }
  setDraining(name: string, draining: boolean): Promise<boolean> {
    return this.nodes.setDraining(name, draining);
  }
  removeNode(name: string): Promise<NodeRemoval> {
    return this.nodes.remove(name);
  }

  place(sessionId: string, tenant: string, request: PlacementRequest, exclude: readonly string[], limits?: PlacementLimits): Promise<PlacementOutcome> {
    return this.placement.place(sessionId, tenant, request, exclude, limits?.maxSessionsPerTenant);
  }
  confirm(sessionId: string, as?: string): Promise<void> {
    return this.directory.confirm(sessionId, as);
  }
  release(sessionId: string): Promise<void> {
    return this.directory.release(sessionId);
  }
  end(sessionId: string): Promise<void> {
    return this.directory.end(sessionId);
  }
  lookup(sessionId: string): Promise<DirectoryEntry | undefined> {
    return this.directory.lookup(sessionId);
  }
  sessionsOfNode(node: string): Promise<DirectoryEntry[]> {
    return this.directory.sessionsOfNode(node);
  }

  reserveVolume(request: VolumeRequest, exclude: readonly string[]): Promise<VolumeReservation> {
    return this.volumes.reserve(request, exclude);
  }
  confirmVolume(tenant: string, name: string): Promise<void> {
    return this.volumes.confirm(tenant, name);
  }
  dropVolume(tenant: string, name: string): Promise<void> {
    return this.volumes.drop(tenant, name);
  }
  lookupVolume(tenant: string, name: string): Promise<VolumeEntry | undefined> {
    return this.volumes.lookup(tenant, name);
  }
  listVolumes(tenant: string): Promise<VolumeEntry[]> {
    return this.volumes.list(tenant);
  }

  recordViewToken(tokenHash: Buffer, sessionId: string, expiresAt: Date): Promise<void> {
    return this.directory.recordViewToken(tokenHash, sessionId, expiresAt);
  }
  lookupViewToken(tokenHash: Buffer): Promise<string | undefined> {
    return this.directory.lookupViewToken(tokenHash);
  }
  recordRun(runId: string, sessionId: string): Promise<void> {
    return this.directory.recordRun(runId, sessionId);
  }
  lookupRun(runId: string): Promise<string | undefined> {
    return this.directory.lookupRun(runId);
  }

  createKey(record: ApiKeyRecord): Promise<void> {
    return this.keys.create(record);
  }
  findKey(id: string): Promise<ApiKeyRecord | undefined> {
    return this.keys.find(id);
  }
  listKeys(tenant?: string): Promise<ApiKeyRecord[]> {
    return this.keys.list(tenant);
  }
  revokeKey(id: string, now?: Date): Promise<boolean> {
    return this.keys.revoke(id, now);
  }
}
