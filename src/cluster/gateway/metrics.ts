/**
 * The gateway's own Prometheus metrics (GET /metrics on a gateway). A node's metrics stay on
 * the node; these say what the gateway did: requests forwarded by route family and status,
 * how long a node took to answer (to its headers), how many nodes each create asked, and how
 * many nodes the sweep found lost.
 */
import { Counter, Histogram, Registry, collectDefaultMetrics } from 'prom-client';

/** 0.25 ms to 10 s: the gateway's own cost is sub-millisecond, a node's answer milliseconds to seconds. */
const PROXY_BUCKETS = [0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10];

/** What a request is, for the labels (a bounded set: never a session id or a path). */
export type RouteFamily = 'sessions' | 'create' | 'list' | 'files' | 'streams' | 'views' | 'runs' | 'mcp' | 'other';

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
}
