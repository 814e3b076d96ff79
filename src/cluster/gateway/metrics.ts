/**
 * The gateway's own Prometheus metrics (GET /metrics on a gateway). A node's metrics stay on
 * the node; these say what the gateway did: requests forwarded by route family and status,
 * how long a node took to answer (to its headers), how many nodes each create asked, and how
 * many nodes the sweep found lost.
 */
import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client';
import type { NodeRecord } from '../store/cluster-store.js';

/** 0.25 ms to 10 s: the gateway's own cost is sub-millisecond, a node's answer milliseconds to seconds. */
const PROXY_BUCKETS = [0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10];

/** What a request is, for the labels (a bounded set: never a session id or a path). */
export type RouteFamily = 'sessions' | 'create' | 'list' | 'files' | 'streams' | 'views' | 'runs' | 'volumes' | 'mcp' | 'other';

export class GatewayMetrics {
  readonly registry = new Registry();

  readonly proxiedRequests = new Counter({
    name: 'sandbox_gateway_proxied_requests_total',
    help: 'Requests the gateway forwarded to a node (or answered for one: 404, 410, 5xx), by route family and status',
    labelNames: ['family', 'status'] as const,
    registers: [this.registry],
  });

  readonly proxyDuration = new Histogram({
    name: 'sandbox_gateway_proxy_duration_seconds',
    help: "Time from a request's arrival at the gateway to its node's answer headers, by route family",
    labelNames: ['family'] as const,
    buckets: PROXY_BUCKETS,
    registers: [this.registry],
  });

  readonly placementTries = new Counter({
    name: 'sandbox_gateway_placement_tries_total',
    help: 'Nodes asked to take a create, by outcome: created, refused (the node failed it; retried elsewhere), rejected (a 4xx, returned as is)',
    labelNames: ['outcome'] as const,
    registers: [this.registry],
  });

  readonly placementsFailed = new Counter({
    name: 'sandbox_gateway_placements_failed_total',
    help: 'Creates no node could take (503 unavailable with the reason)',
    registers: [this.registry],
  });

  readonly nodesLost = new Counter({
    name: 'sandbox_gateway_nodes_lost_total',
    help: "Nodes this gateway's sweep marked lost (silent for longer than SBX_NODE_LOST_AFTER_MS)",
    registers: [this.registry],
  });

  readonly storeErrors = new Counter({
    name: 'sandbox_gateway_store_errors_total',
    help: 'Calls to the cluster state (PostgreSQL) that failed or timed out (answered 503 cluster_state_unavailable)',
    registers: [this.registry],
  });

  constructor() {
    collectDefaultMetrics({ register: this.registry });
  }

  /**
   * The cluster as the registry says at each scrape (the gateway's cached node list, at most
   * 1 s old): nodes by state, and each node's sessions and commitment. Any gateway tells the
   * same; scrape one. A scrape while the database is down leaves these out (logged nowhere:
   * the store error counter says it).
   */
  watchCluster(nodes: () => Promise<NodeRecord[]>): void {
    const read = async (): Promise<NodeRecord[] | undefined> => nodes().catch(() => undefined);
    new Gauge({
      name: 'sandbox_cluster_nodes',
      help: 'Nodes in the registry by state: up, draining (up and draining), lost',
      labelNames: ['state'] as const,
      registers: [this.registry],
      async collect() {
        const all = await read();
        if (!all) return;
        this.reset();
        const up = all.filter((node) => node.state === 'up');
        this.set({ state: 'up' }, up.length);
        this.set({ state: 'draining' }, up.filter((node) => node.draining).length);
        this.set({ state: 'lost' }, all.length - up.length);
      },
    });
    const perNode = (name: string, help: string, value: (node: NodeRecord) => number) =>
      new Gauge({
        name,
        help,
        labelNames: ['node'] as const,
        registers: [this.registry],
        async collect() {
          const all = await read();
          if (!all) return;
          this.reset();
          for (const node of all) this.set({ node: node.name }, value(node));
        },
      });
    perNode('sandbox_cluster_node_sessions', 'Sessions the directory counts on each node (creating or live)', (node) => node.capacity.sessions);
    perNode('sandbox_cluster_node_vcpus_committed_ratio', "Each node's vCPUs committed to sessions, of what it offers", (node) => ratio(node.capacity.vcpus));
    perNode('sandbox_cluster_node_memory_committed_ratio', "Each node's memory committed to sessions, of what it offers", (node) =>
      ratio(node.capacity.memoryMiB),
    );
  }
}

function ratio(resource: { total: number; committed: number }): number {
  return resource.total > 0 ? resource.committed / resource.total : 0;
}
