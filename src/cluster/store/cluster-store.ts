/**
 * The cluster's shared state, as the gateways and nodes see it (issue 22; docs/cluster.md).
 * One implementation: PostgreSQL (pg-cluster-store.ts). This file is the contract between the
 * gateway (src/cluster/gateway/), the node agent (src/cluster/node/) and the store.
 */
import type { ApiKeyRecord } from '../../api/auth/key-store.js';
import type { RuntimeName } from '../../runtimes/runtime.js';
import type { NodeSnapshot, PlacementRequest } from '../placement.js';

/** What a node says of itself when it starts and on every heartbeat. */
export interface NodeReport {
  /** The URL a gateway reaches this node's API at (its --advertise). */
  readonly url: string;
  readonly runtimes: readonly RuntimeName[];
  /** Templates whose image is built on this node. */
  readonly templates: readonly string[];
  /** Warm sandboxes ready to hand out, per template. */
  readonly warm: Readonly<Record<string, number>>;
  /** What the node offers: sessions, memory (MiB) and vCPUs (its overcommit included). */
  readonly maxSessions: number;
  readonly memoryMiB: number;
  readonly vcpus: number;
  /** The size of one session on this node (its SBX_MEMORY_MIB and vCPUs). */
  readonly sessionMemoryMiB: number;
  readonly sessionVcpus: number;
  /** The orchestrator's version, for `sbx nodes`. */
  readonly version: string;
}

export type NodeState = 'up' | 'lost';

/** A node as the registry holds it. Commitments are the directory's live sessions on it. */
export interface NodeRecord extends NodeSnapshot {
  readonly url: string;
  readonly state: NodeState;
  readonly lastHeartbeat: Date;
  readonly registeredAt: Date;
  readonly version: string;
  readonly sessionMemoryMiB: number;
  readonly sessionVcpus: number;
}

/**
 * A session in the directory: where it lives and whose it is. `creating` while its node is
 * being asked (its size already counts against the node); `ended` is kept so its recording
 * and trajectory stay routable; `lost` when its node stopped heartbeating (410 from then on).
 */
export type DirectoryState = 'creating' | 'live' | 'ended' | 'lost';

export interface DirectoryEntry {
  readonly sessionId: string;
  readonly tenant: string;
  readonly node: string;
  readonly state: DirectoryState;
  readonly memoryMiB: number;
  readonly vcpus: number;
  readonly createdAt: Date;
  /** Why it is lost (its node's name and when it was last heard from). */
  readonly reason: string | null;
}

/**
 * A volume in the directory (docs/volumes.md, "through a gateway"): whose it is and which node's
 * disk holds it. Keyed by tenant and name: another tenant's volume of the same name is another
 * row, and a lookup never crosses tenants. `creating` while its node is asked: the name is
 * taken cluster-wide, but nothing may mount it yet.
 */
export interface VolumeEntry {
  readonly tenant: string;
  readonly name: string;
  readonly node: string;
  readonly state: 'creating' | 'ready';
  readonly sizeMiB: number;
  readonly createdAt: Date;
}

/** What a volume's create asks of a node, and the tenant's quota in the whole cluster. */
export interface VolumeRequest {
  readonly tenant: string;
  readonly name: string;
  readonly sizeMiB: number;
  /** Only nodes that run this runtime (the one creates are placed for): a volume is mounted by its node's sessions. */
  readonly runtime: RuntimeName;
  readonly quota: { readonly count: number; readonly mib: number };
}

/**
 * The outcome of reserving a volume's name on a node: the node chosen, or why not (the name is
 * taken; the tenant's volumes, counted as of the statement, are at a quota; no node can take it).
 */
export type VolumeReservation =
  | { readonly reserved: true; readonly node: string }
  | { readonly reserved: false; readonly why: 'exists' | 'quota' | 'no_node'; readonly volumes: number; readonly mib: number };

/** A heartbeat's answer: a node that is told `replaced` or `lost` stops serving as this name. */
export type HeartbeatAnswer = 'ok' | 'replaced' | 'lost';

/** `sbx node remove`: what the directory forgot with the node, or why it kept it. */
export type NodeRemoval = { removed: true; sessions: number; volumes: number } | { removed: false; why: 'missing' | 'not_lost' };

/** A registration is refused when another instance holds the name and is still heartbeating. */
export class NodeNameTakenError extends Error {
  readonly code = 'node_name_taken';
}

/**
 * Limits a placement checks in the same statement. maxSessionsPerTenant: the tenant's
 * sessions (creating or live) anywhere in the cluster; past it, place() throws a 429
 * tenant_session_limit (counted as of the statement's start: simultaneous creates of one
 * tenant may pass it by their number; each node still enforces its own limit).
 */
export interface PlacementLimits {
  readonly maxSessionsPerTenant?: number;
}

/** The outcome of one placement transaction. */
export type PlacementOutcome =
  | { readonly placed: true; readonly node: NodeRecord }
  | { readonly placed: false; /** Why nobody can take it, counted per constraint (placement.ts). */ readonly reason: string };

export interface ClusterStore {
  /** Applies pending schema migrations once, under an advisory lock (gateways may start together). */
  migrate(): Promise<void>;
  /** Is the database reachable now? (the gateway's /healthz). */
  ping(): Promise<boolean>;
  close(): Promise<void>;

  // --- the node registry ---
  /** Registers (or re-registers) `name` for this process (`instance`, random per start). */
  registerNode(name: string, instance: string, report: NodeReport): Promise<void>;
  heartbeat(name: string, instance: string, report: NodeReport): Promise<HeartbeatAnswer>;
  /** Marks nodes silent for longer than `staleMs` lost, and their live/creating sessions lost. Returns their names. */
  markLostNodes(staleMs: number, now?: Date): Promise<string[]>;
  listNodes(): Promise<NodeRecord[]>;
  getNode(name: string): Promise<NodeRecord | undefined>;
  /** Drained nodes take no new sessions. False if there is no such node. */
  setDraining(name: string, draining: boolean): Promise<boolean>;
  /**
   * Forgets a lost node for good (an operator's word that it will not come back with its
   * disk): its row, its sessions' directory rows and routes, and its volumes' rows. Refused for
   * a node that is not lost. A node of that name that comes back registers as a new one.
   */
  removeNode(name: string): Promise<NodeRemoval>;

  // --- the session directory ---
  /**
   * Choose with placement.ts among the feasible nodes (those in `exclude` left out), then in
   * one statement (its own transaction) lock the chosen node's row, check the create still
   * fits, insert the directory row (`creating`) and count it (placement-tx.ts). Two gateways
   * placing at once never overfill a node; a node filled meanwhile means choosing again.
   */
  place(sessionId: string, tenant: string, request: PlacementRequest, exclude: readonly string[], limits?: PlacementLimits): Promise<PlacementOutcome>;
  /**
   * The node answered: the session is live. `as`: the id the node gave it, when not
   * `sessionId` (a warm sandbox claimed for the create keeps its own id): the row is renamed.
   */
  confirm(sessionId: string, as?: string): Promise<void>;
  /** The node refused or failed: the row goes, its size no longer counts. */
  release(sessionId: string): Promise<void>;
  /** The session ended (destroyed, timed out, failed): kept for its artifacts, counts no more. */
  end(sessionId: string): Promise<void>;
  lookup(sessionId: string): Promise<DirectoryEntry | undefined>;
  sessionsOfNode(node: string): Promise<DirectoryEntry[]>;

  // --- volumes: which node's disk holds each tenant's volume ---
  /**
   * Chooses the least-used node (fewest volumes, then fewest sessions for its size) among the
   * healthy, undrained ones that run the runtime (those in `exclude` left out) and inserts the
   * row `creating` there, in one statement that also checks the name is free and the tenant's
   * quota in the cluster.
   */
  reserveVolume(request: VolumeRequest, exclude: readonly string[]): Promise<VolumeReservation>;
  /** Its node made it: it may be mounted. */
  confirmVolume(tenant: string, name: string): Promise<void>;
  /** Its node refused it, failed, or deleted it: the row goes. */
  dropVolume(tenant: string, name: string): Promise<void>;
  lookupVolume(tenant: string, name: string): Promise<VolumeEntry | undefined>;
  listVolumes(tenant: string): Promise<VolumeEntry[]>;

  // --- tokens and runs that name no session in their path ---
  /** A live-view token's route (by its SHA-256): which session it opens. */
  recordViewToken(tokenHash: Buffer, sessionId: string, expiresAt: Date): Promise<void>;
  lookupViewToken(tokenHash: Buffer): Promise<string | undefined>;
  recordRun(runId: string, sessionId: string): Promise<void>;
  lookupRun(runId: string): Promise<string | undefined>;

  // --- tenants' API keys ---
  /** Keys have the single host's format and record (api/auth/api-key.ts, key-store.ts). */
  createKey(record: ApiKeyRecord): Promise<void>;
  findKey(id: string): Promise<ApiKeyRecord | undefined>;
  listKeys(tenant?: string): Promise<ApiKeyRecord[]>;
  revokeKey(id: string, now?: Date): Promise<boolean>;
}

export type { ApiKeyRecord };
