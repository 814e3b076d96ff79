/**
 * The gateway's reads of the cluster's state, each bounded in time and briefly cached.
 *
 * Every call to the store gets a deadline (settings.storeTimeoutMs), on top of the store's
 * own bounds: a PostgreSQL that is down or partitioned must answer the client 503
 * cluster_state_unavailable within ~2 s, never hold the request. Directory entries and the node list are reused for directoryCacheMs (1 s)
 * so that an action through a gateway costs no database round trip most of the time; API key
 * records for keyCacheMs (a revoked key stops within it). A `lost` answer is never replaced by
 * a cached one: the sweep and any failed forward drop the cached entries of that node, and a
 * lost entry, once read, is what is cached (it never comes back to life).
 */
import type { Logger } from 'pino';
import type { ApiKeyRecord, ClusterStore, DirectoryEntry, NodeRecord } from '../store/cluster-store.js';
import { OrchestratorError } from '../../errors.js';
import { httpStatusOf } from '../../api/errors.js';
import { ClusterStateUnavailableError } from './errors.js';
import type { GatewayMetrics } from './metrics.js';

interface Cached<T> {
  readonly value: Promise<T>;
  readonly until: number;
}

export interface ClusterStateOptions {
  readonly store: ClusterStore;
  readonly logger: Logger;
  readonly metrics: GatewayMetrics;
  readonly storeTimeoutMs: number;
  readonly directoryCacheMs: number;
  readonly keyCacheMs: number;
  /** For tests: the clock. */
  readonly now?: () => number;
}

/** A cache that never grows past this many entries: cleared whole when full (entries live 1-2 s anyway). */
const MAX_CACHED = 50_000;

export class ClusterState {
  private readonly sessions = new Map<string, Cached<DirectoryEntry | undefined>>();
  private readonly keys = new Map<string, Cached<ApiKeyRecord | undefined>>();
  private nodeList: Cached<NodeRecord[]> | undefined;
  private index: { list: NodeRecord[]; byName: Map<string, NodeRecord> } | undefined;
  private readonly now: () => number;

  constructor(private readonly opts: ClusterStateOptions) {
    this.now = opts.now ?? Date.now;
  }

  get store(): ClusterStore {
    return this.opts.store;
  }

  /** A store call with a deadline: its failure or lateness is a 503, its detail logged once here. */
  call<T>(what: string, run: (store: ClusterStore) => Promise<T>): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      const timer = setTimeout(() => {
        this.opts.metrics.storeErrors.inc();
        this.opts.logger.warn({ what, timeoutMs: this.opts.storeTimeoutMs }, 'the cluster store did not answer in time');
        reject(new ClusterStateUnavailableError(what, `no answer within ${this.opts.storeTimeoutMs} ms`));
      }, this.opts.storeTimeoutMs);
      let started: Promise<T>;
      try {
        started = run(this.opts.store);
      } catch (err) {
        started = Promise.reject(err);
      }
      started.then(
        (value) => {
          clearTimeout(timer);
          resolve(value);
        },
        (err: unknown) => {
          clearTimeout(timer);
          // A client's error the store answered (a tenant's limit, a taken id) is no failure of the store.
          if (err instanceof OrchestratorError && httpStatusOf(err.code) < 500) {
            reject(err);
            return;
          }
          this.opts.metrics.storeErrors.inc();
          this.opts.logger.warn({ what, err }, 'the cluster store failed');
          // The store's own unavailable error (503) as is; anything else is a bug, not "retry later" (500).
          reject(err);
        },
      );
    });
  }

  /** The directory's entry of a session (cached for directoryCacheMs). */
  lookup(sessionId: string): Promise<DirectoryEntry | undefined> {
    return this.cached(this.sessions, sessionId, this.opts.directoryCacheMs, () => this.call('lookup', (store) => store.lookup(sessionId)));
  }

  /** An API key's record (cached for keyCacheMs). */
  findKey(id: string): Promise<ApiKeyRecord | undefined> {
    return this.cached(this.keys, id, this.opts.keyCacheMs, () => this.call('findKey', (store) => store.findKey(id)));
  }

  /** Every registered node (cached for directoryCacheMs; `fresh`: read now, and cached from now). */
  nodes(fresh = false): Promise<NodeRecord[]> {
    const now = this.now();
    if (!fresh && this.nodeList && this.nodeList.until > now) return this.nodeList.value;
    const value = this.call('listNodes', (store) => store.listNodes());
    this.nodeList = { value, until: now + this.opts.directoryCacheMs };
    value.catch(() => {
      if (this.nodeList?.value === value) this.nodeList = undefined;
    });
    return value;
  }

  /** A node by name, from the cached list (indexed once per list read: a request's route is not a scan of 1,000 nodes). */
  async node(name: string): Promise<NodeRecord | undefined> {
    const found = this.indexOf(await this.nodes()).get(name);
    if (found) return found;
    this.nodeList = undefined; // a node registered since the list was read
    return this.indexOf(await this.nodes()).get(name);
  }

  private indexOf(list: NodeRecord[]): Map<string, NodeRecord> {
    if (this.index?.list !== list) this.index = { list, byName: new Map(list.map((node) => [node.name, node])) };
    return this.index.byName;
  }

  /** Nodes that are up and heartbeating: where an unrouted request (an unknown token, the API description) can go. */
  async healthyNodes(): Promise<NodeRecord[]> {
    return (await this.nodes()).filter((node) => node.state === 'up' && node.healthy);
  }

  /** Forget what is cached of a session (its create was confirmed or released, its node failed). */
  forgetSession(sessionId: string): void {
    this.sessions.delete(sessionId);
  }

  /** A node was found lost (or failed a forward): nothing cached may still route to it. */
  forgetNode(name: string): void {
    this.nodeList = undefined;
    for (const [id, cached] of this.sessions) {
      void cached.value.then(
        (entry) => {
          if (entry?.node === name && entry.state !== 'lost' && this.sessions.get(id) === cached) this.sessions.delete(id);
        },
        () => undefined,
      );
    }
  }

  private cached<T>(map: Map<string, Cached<T>>, key: string, ttlMs: number, load: () => Promise<T>): Promise<T> {
    const now = this.now();
    const hit = map.get(key);
    if (hit && hit.until > now) return hit.value;
    if (map.size >= MAX_CACHED) map.clear();
    const value = load();
    const entry = { value, until: now + ttlMs };
    map.set(key, entry);
    // A failure is not cached: the next request asks again.
    value.catch(() => {
      if (map.get(key) === entry) map.delete(key);
    });
    return value;
  }
}
