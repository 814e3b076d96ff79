/**
 * A gateway's view of the nodes, as placement sees them (placement-tx.ts reads it from
 * PostgreSQL and chooses with it). Each node is one snapshot object, kept and updated in place
 * for the life of the view, so that placement's NodeSampler, built once over them, draws a
 * create's sample without walking every node (docs/benchmarks.md: that walk was most of the
 * gateway's CPU a create). In each snapshot:
 *   - the commitment is the node's row plus this process's creates in flight there (chosen,
 *     statement not yet answered), so concurrent creates of one gateway see each other;
 *   - health is judged on PostgreSQL's clock when a row or a heartbeat comes in, and again for
 *     every node once the earliest heartbeat the view counts as fresh has grown too old.
 */
import { NodeSampler, type NodeSnapshot, type PlacementRequest } from '../placement.js';

/** What the view holds of a node's row: numbers as numbers (no date or numeric to parse). */
export interface ViewRow {
  name: string;
  state: string;
  runtimes: string[];
  templates: string[];
  warm: Record<string, number>;
  max_sessions: number;
  memory_mib: number;
  vcpus: number;
  draining: boolean;
  change_seq: number;
  sessions: number;
  committed_memory_mib: number;
  committed_vcpus: number;
  heartbeat_ms: number;
}

/** A snapshot the view updates in place (one object shape for every node keeps placement's loops fast). */
interface ViewSnapshot extends NodeSnapshot {
  runtimes: NodeSnapshot['runtimes'];
  templates: string[];
  warm: Record<string, number>;
  capacity: { maxSessions: number; sessions: number; memoryMiB: { total: number; committed: number }; vcpus: { total: number; committed: number } };
  draining: boolean;
  healthy: boolean;
}

interface Known {
  readonly snapshot: ViewSnapshot;
  up: boolean;
  lastHeartbeat: number;
  changeSeq: number;
}

/** Creates this process has chosen a node for and not yet heard back about, on one node. */
interface InFlight {
  sessions: number;
  memoryMiB: number;
  vcpus: number;
}

export class NodeView {
  private readonly known = new Map<string, Known>();
  private readonly inFlight = new Map<string, InFlight>();
  private sampler: NodeSampler | undefined;
  /** The newest change_seq read. */
  newestChange = 0;
  /** PostgreSQL's clock (ms) at which the first heartbeat now counted fresh stops being so. */
  private healthUntil = Infinity;

  constructor(private readonly staleMs: number) {}

  get size(): number {
    return this.known.size;
  }

  /** The nodes to choose among (the same sampler until a node comes or goes). */
  nodes(): NodeSampler {
    this.sampler ??= new NodeSampler([...this.known.values()].map((known) => known.snapshot));
    return this.sampler;
  }

  /** Takes `row` unless the view knows a newer change of that node (reads may answer out of order). */
  remember(row: ViewRow, dbNow: number): void {
    if (row.change_seq > this.newestChange) this.newestChange = row.change_seq;
    let known = this.known.get(row.name);
    // Equal: the same change read later, with a newer heartbeat (a heartbeat takes no change_seq).
    if (known && known.changeSeq > row.change_seq) return;
    const flying = this.inFlight.get(row.name);
    const capacity = {
      maxSessions: row.max_sessions,
      sessions: row.sessions + (flying?.sessions ?? 0),
      memoryMiB: { total: row.memory_mib, committed: row.committed_memory_mib + (flying?.memoryMiB ?? 0) },
      vcpus: { total: row.vcpus, committed: row.committed_vcpus + (flying?.vcpus ?? 0) },
    };
    if (known === undefined) {
      const snapshot: ViewSnapshot = {
        name: row.name,
        runtimes: row.runtimes as NodeSnapshot['runtimes'],
        templates: row.templates,
        warm: row.warm,
        capacity,
        draining: row.draining,
        healthy: false,
      };
      known = { snapshot, up: false, lastHeartbeat: 0, changeSeq: 0 };
      this.known.set(row.name, known);
      this.sampler = undefined;
    } else {
      const { snapshot } = known;
      const sizes = snapshot.capacity.vcpus.total !== capacity.vcpus.total || snapshot.capacity.memoryMiB.total !== capacity.memoryMiB.total;
      const warmGained = Object.entries(row.warm).some(([template, count]) => count > 0 && !((snapshot.warm[template] ?? 0) > 0));
      snapshot.runtimes = row.runtimes as NodeSnapshot['runtimes'];
      snapshot.templates = row.templates;
      snapshot.warm = row.warm;
      snapshot.capacity = capacity;
      snapshot.draining = row.draining;
      if (sizes) this.sampler?.sizesChanged();
      if (warmGained) this.sampler?.warmChanged();
    }
    known.up = row.state === 'up';
    known.lastHeartbeat = row.heartbeat_ms;
    known.changeSeq = row.change_seq;
    this.judge(known, dbNow);
  }

  /** A liveness read's line: `true` when the view holds this change of the node (else its row must be read). */
  heard(name: string, changeSeq: number, heartbeatMs: number, up: boolean): boolean {
    const known = this.known.get(name);
    if (!known || known.changeSeq < changeSeq) return false;
    if (known.changeSeq === changeSeq) {
      known.lastHeartbeat = heartbeatMs;
      known.up = up;
    }
    return true;
  }

  /** After a read of every node: those not in it are gone (removed by an operator), unless the view knows a newer change of them. */
  keepOnly(names: ReadonlySet<string>, newestRead: number): void {
    for (const [name, known] of this.known) {
      if (names.has(name) || known.changeSeq > newestRead) continue;
      this.known.delete(name);
      this.sampler = undefined;
    }
  }

  /** A node whose row is gone. */
  forget(name: string): void {
    if (this.known.delete(name)) this.sampler = undefined;
  }

  /** What PostgreSQL said of a node's health under its lock. */
  setHealthy(name: string, healthy: boolean): void {
    const known = this.known.get(name);
    if (known) known.snapshot.healthy = healthy;
  }

  /** Health as of `dbNow` (PostgreSQL's clock): every node when `everything` or when one fresh heartbeat has grown too old. */
  judgeAll(dbNow: number, everything: boolean): void {
    if (!everything && dbNow < this.healthUntil) return;
    this.healthUntil = Infinity;
    for (const known of this.known.values()) this.judge(known, dbNow);
  }

  private judge(known: Known, dbNow: number): void {
    const healthy = known.up && known.lastHeartbeat > dbNow - this.staleMs;
    known.snapshot.healthy = healthy;
    if (healthy) this.healthUntil = Math.min(this.healthUntil, known.lastHeartbeat + this.staleMs);
  }

  /** Counts a chosen create against its node until the statement answers; returns its release. */
  takeInFlight(name: string, request: PlacementRequest): () => void {
    const entry = this.inFlight.get(name) ?? { sessions: 0, memoryMiB: 0, vcpus: 0 };
    this.inFlight.set(name, entry);
    const add = (sign: 1 | -1): void => {
      entry.sessions += sign;
      entry.memoryMiB += sign * request.memoryMiB;
      entry.vcpus += sign * request.vcpus;
      // The snapshot is its row plus what is in flight: changed together, never one without the other.
      const capacity = this.known.get(name)?.snapshot.capacity;
      if (capacity) {
        capacity.sessions += sign;
        capacity.memoryMiB.committed += sign * request.memoryMiB;
        capacity.vcpus.committed += sign * request.vcpus;
      }
    };
    add(1);
    return () => {
      add(-1);
      if (entry.sessions === 0 && this.inFlight.get(name) === entry) this.inFlight.delete(name);
    };
  }
}
