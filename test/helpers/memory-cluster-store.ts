/**
 * An in-memory ClusterStore (src/cluster/store/cluster-store.ts) for the gateway's unit tier:
 * the contract's behaviour with the real placement code, no PostgreSQL. `mode` makes it fail
 * as a database that is down does: `fail` rejects at once with the store's unavailable error,
 * `hang` never answers (the gateway's own deadline must answer the client).
 */
import type { ApiKeyRecord } from '../../src/api/auth/key-store.js';
import { place, type PlacementRequest } from '../../src/cluster/placement.js';
import type {
  ClusterStore,
  DirectoryEntry,
  HeartbeatAnswer,
  NodeRemoval,
  NodeRecord,
  NodeReport,
  PlacementOutcome,
  VolumeEntry,
  VolumeRequest,
  VolumeReservation,
} from '../../src/cluster/store/cluster-store.js';
import { ClusterStateUnavailableError } from '../../src/cluster/store/errors.js';

interface NodeRow {
  name: string;
  instance: string;
  report: NodeReport;
  state: 'up' | 'lost';
  draining: boolean;
  lastHeartbeat: Date;
  registeredAt: Date;
}

export class MemoryClusterStore implements ClusterStore {
  mode: 'up' | 'fail' | 'hang' = 'up';
  /** Calls made, by method (tests count the store's round trips). */
  readonly calls = new Map<string, number>();
  readonly nodeRows = new Map<string, NodeRow>();
  readonly directory = new Map<string, DirectoryEntry>();
  readonly viewTokens = new Map<string, { sessionId: string; expiresAt: Date }>();
  readonly runs = new Map<string, string>();
  readonly keys = new Map<string, ApiKeyRecord>();
  /** Volumes by `tenant/name`. */
  readonly volumes = new Map<string, VolumeEntry>();

  private async gate(method: string): Promise<void> {
    this.calls.set(method, (this.calls.get(method) ?? 0) + 1);
    if (this.mode === 'fail') throw new ClusterStateUnavailableError(method, 'connect ECONNREFUSED 127.0.0.1:5432');
    if (this.mode === 'hang') await new Promise(() => undefined);
  }

  async migrate(): Promise<void> {}
  async ping(): Promise<boolean> {
    await this.gate('ping');
    return true;
  }
  async close(): Promise<void> {}

  async registerNode(name: string, instance: string, report: NodeReport): Promise<void> {
    await this.gate('registerNode');
    const now = new Date();
    this.nodeRows.set(name, {
      name,
      instance,
      report,
      state: 'up',
      draining: this.nodeRows.get(name)?.draining ?? false,
      lastHeartbeat: now,
      registeredAt: now,
    });
  }
  async heartbeat(name: string, instance: string, report: NodeReport): Promise<HeartbeatAnswer> {
    await this.gate('heartbeat');
    const row = this.nodeRows.get(name);
    if (!row || row.instance !== instance) return 'replaced';
    if (row.state === 'lost') return 'lost';
    row.report = report;
    row.lastHeartbeat = new Date();
    return 'ok';
  }
  async markLostNodes(staleMs: number, now = new Date()): Promise<string[]> {
    await this.gate('markLostNodes');
    const lost: string[] = [];
    for (const row of this.nodeRows.values()) {
      if (row.state === 'up' && now.getTime() - row.lastHeartbeat.getTime() > staleMs) {
        row.state = 'lost';
        lost.push(row.name);
        for (const [id, entry] of this.directory) {
          if (entry.node === row.name && (entry.state === 'live' || entry.state === 'creating')) {
            this.directory.set(id, { ...entry, state: 'lost', reason: `node ${row.name} last heard from at ${row.lastHeartbeat.toISOString()}` });
          }
        }
      }
    }
    return lost;
  }
  async listNodes(): Promise<NodeRecord[]> {
    await this.gate('listNodes');
    return [...this.nodeRows.values()].map((row) => this.record(row));
  }
  async getNode(name: string): Promise<NodeRecord | undefined> {
    await this.gate('getNode');
    const row = this.nodeRows.get(name);
    return row && this.record(row);
  }
  async setDraining(name: string, draining: boolean): Promise<boolean> {
    await this.gate('setDraining');
    const row = this.nodeRows.get(name);
    if (!row) return false;
    row.draining = draining;
    return true;
  }

  async removeNode(name: string): Promise<NodeRemoval> {
    await this.gate('removeNode');
    const row = this.nodeRows.get(name);
    if (!row) return { removed: false, why: 'missing' };
    if (row.state !== 'lost') return { removed: false, why: 'not_lost' };
    let sessions = 0;
    let volumes = 0;
    for (const [id, entry] of this.directory) {
      if (entry.node !== name) continue;
      this.directory.delete(id);
      sessions++;
      for (const [token, route] of this.viewTokens) if (route.sessionId === id) this.viewTokens.delete(token);
      for (const [run, sessionId] of this.runs) if (sessionId === id) this.runs.delete(run);
    }
    for (const [key, entry] of this.volumes) {
      if (entry.node !== name) continue;
      this.volumes.delete(key);
      volumes++;
    }
    this.nodeRows.delete(name);
    return { removed: true, sessions, volumes };
  }

  async place(sessionId: string, tenant: string, request: PlacementRequest, exclude: readonly string[]): Promise<PlacementOutcome> {
    await this.gate('place');
    const nodes = [...this.nodeRows.values()].map((row) => this.record(row));
    const chosen = place(request, nodes, { exclude: new Set(exclude) });
    if (!chosen.ok) return { placed: false, reason: chosen.reason };
    const wanted = request.volumes?.names ?? [];
    if (wanted.some((name) => this.volumes.get(`${tenant}/${name}`)?.node !== chosen.node.name)) {
      return { placed: false, reason: `the volumes ${wanted.join(', ')} are not (or no longer) all on node '${chosen.node.name}'` };
    }
    this.directory.set(sessionId, {
      sessionId,
      tenant,
      node: chosen.node.name,
      state: 'creating',
      memoryMiB: request.memoryMiB,
      vcpus: request.vcpus,
      createdAt: new Date(),
      reason: null,
    });
    return { placed: true, node: nodes.find((node) => node.name === chosen.node.name) as NodeRecord };
  }
  async confirm(sessionId: string, as = sessionId): Promise<void> {
    await this.gate('confirm');
    const entry = this.directory.get(sessionId);
    if (!entry || entry.state !== 'creating') return;
    this.directory.delete(sessionId);
    this.directory.set(as, { ...entry, sessionId: as, state: 'live' });
  }
  async release(sessionId: string): Promise<void> {
    await this.gate('release');
    this.directory.delete(sessionId);
  }
  async end(sessionId: string): Promise<void> {
    await this.gate('end');
    const entry = this.directory.get(sessionId);
    if (entry && entry.state !== 'lost') this.directory.set(sessionId, { ...entry, state: 'ended' });
  }
  async lookup(sessionId: string): Promise<DirectoryEntry | undefined> {
    await this.gate('lookup');
    return this.directory.get(sessionId);
  }
  async sessionsOfNode(node: string): Promise<DirectoryEntry[]> {
    await this.gate('sessionsOfNode');
    return [...this.directory.values()].filter((entry) => entry.node === node);
  }

  async reserveVolume(request: VolumeRequest, exclude: readonly string[]): Promise<VolumeReservation> {
    await this.gate('reserveVolume');
    const mine = [...this.volumes.values()].filter((v) => v.tenant === request.tenant);
    const counted = { volumes: mine.length, mib: mine.reduce((sum, v) => sum + v.sizeMiB, 0) };
    if (this.volumes.has(`${request.tenant}/${request.name}`)) return { reserved: false, why: 'exists', ...counted };
    if (counted.volumes + 1 > request.quota.count || counted.mib + request.sizeMiB > request.quota.mib) return { reserved: false, why: 'quota', ...counted };
    const held = (node: string) => [...this.volumes.values()].filter((v) => v.node === node).length;
    const node = [...this.nodeRows.values()]
      .filter((row) => row.state === 'up' && !row.draining && row.report.runtimes.includes(request.runtime) && !exclude.includes(row.name))
      .sort((a, b) => held(a.name) - held(b.name))[0];
    if (!node) return { reserved: false, why: 'no_node', ...counted };
    const { tenant, name, sizeMiB } = request;
    this.volumes.set(`${tenant}/${name}`, { tenant, name, sizeMiB, node: node.name, state: 'creating', createdAt: new Date() });
    return { reserved: true, node: node.name };
  }
  async confirmVolume(tenant: string, name: string): Promise<void> {
    await this.gate('confirmVolume');
    const entry = this.volumes.get(`${tenant}/${name}`);
    if (entry) this.volumes.set(`${tenant}/${name}`, { ...entry, state: 'ready' });
  }
  async dropVolume(tenant: string, name: string): Promise<void> {
    await this.gate('dropVolume');
    this.volumes.delete(`${tenant}/${name}`);
  }
  async lookupVolume(tenant: string, name: string): Promise<VolumeEntry | undefined> {
    await this.gate('lookupVolume');
    return this.volumes.get(`${tenant}/${name}`);
  }
  async listVolumes(tenant: string): Promise<VolumeEntry[]> {
    await this.gate('listVolumes');
    return [...this.volumes.values()].filter((v) => v.tenant === tenant).sort((a, b) => a.name.localeCompare(b.name));
  }

  async recordViewToken(tokenHash: Buffer, sessionId: string, expiresAt: Date): Promise<void> {
    await this.gate('recordViewToken');
    this.viewTokens.set(tokenHash.toString('hex'), { sessionId, expiresAt });
  }
  async lookupViewToken(tokenHash: Buffer): Promise<string | undefined> {
    await this.gate('lookupViewToken');
    const found = this.viewTokens.get(tokenHash.toString('hex'));
    return found && found.expiresAt.getTime() > Date.now() ? found.sessionId : undefined;
  }
  async recordRun(runId: string, sessionId: string): Promise<void> {
    await this.gate('recordRun');
    this.runs.set(runId, sessionId);
  }
  async lookupRun(runId: string): Promise<string | undefined> {
    await this.gate('lookupRun');
    return this.runs.get(runId);
  }

  async createKey(record: ApiKeyRecord): Promise<void> {
    await this.gate('createKey');
    this.keys.set(record.id, record);
  }
  async findKey(id: string): Promise<ApiKeyRecord | undefined> {
    await this.gate('findKey');
    return this.keys.get(id);
  }
  async listKeys(tenant?: string): Promise<ApiKeyRecord[]> {
    await this.gate('listKeys');
    return [...this.keys.values()].filter((key) => tenant === undefined || key.tenant === tenant);
  }
  async revokeKey(id: string, now = new Date()): Promise<boolean> {
    await this.gate('revokeKey');
    const key = this.keys.get(id);
    if (!key) return false;
    if (key.revokedAt === null) this.keys.set(id, { ...key, revokedAt: now.toISOString() });
    return true;
  }

  /** The commitments are the directory's live and creating sessions on the node. */
  private record(row: NodeRow): NodeRecord {
    const mine = [...this.directory.values()].filter((entry) => entry.node === row.name && (entry.state === 'live' || entry.state === 'creating'));
    const { report } = row;
    return {
      name: row.name,
      url: report.url,
      runtimes: report.runtimes,
      templates: report.templates,
      warm: report.warm,
      capacity: {
        maxSessions: report.maxSessions,
        sessions: mine.length,
        memoryMiB: { total: report.memoryMiB, committed: mine.reduce((sum, entry) => sum + entry.memoryMiB, 0) },
        vcpus: { total: report.vcpus, committed: mine.reduce((sum, entry) => sum + entry.vcpus, 0) },
      },
      draining: row.draining,
      healthy: row.state === 'up',
      state: row.state,
      lastHeartbeat: row.lastHeartbeat,
      registeredAt: row.registeredAt,
      version: report.version,
      sessionMemoryMiB: report.sessionMemoryMiB,
      sessionVcpus: report.sessionVcpus,
    };
  }
}
