/**
 * A gateway in front of fake nodes (fake-node.ts) and an in-memory (or PostgreSQL) store,
 * listening on loopback: the unit tier's cluster.
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { pino } from 'pino';
import { generateApiKey } from '../../src/api/auth/api-key.js';
import { createGateway, type Gateway } from '../../src/cluster/gateway/gateway.js';
import { DEFAULT_GATEWAY_SETTINGS, type GatewaySettings } from '../../src/cluster/gateway/settings.js';
import type { ClusterStore } from '../../src/cluster/store/cluster-store.js';
import { startFakeNode, TEST_SECRET, type FakeNode } from './fake-node.js';

export interface TestCluster {
  store: ClusterStore;
  nodes: FakeNode[];
  gateway: Gateway;
  url: string;
  port: number;
  /** Keys of tenants "acme" and "umbrella", and their ids. */
  keyA: string;
  keyB: string;
  keyAId: string;
  /** A session of `tenant` on `node`, in the directory and on the node. */
  seed(id: string, tenant: string, node: FakeNode, state?: 'live' | 'ended'): Promise<void>;
  close(): Promise<void>;
}

export const FAST_SETTINGS: GatewaySettings = {
  ...DEFAULT_GATEWAY_SETTINGS,
  runtime: 'container',
  storeTimeoutMs: 400,
  keyCacheMs: 200,
  directoryCacheMs: 200,
  nodeConnectTimeoutMs: 1_000,
  lostAfterMs: 1_000,
};

export async function startCluster(store: ClusterStore, nodeNames: string[], settings: Partial<GatewaySettings> = {}): Promise<TestCluster> {
  const nodes = await Promise.all(nodeNames.map((name) => startFakeNode(name)));
  for (const node of nodes) await store.registerNode(node.name, `instance-${node.name}`, node.report());
  // The nodes heartbeat as real ones do (every 2 s; faster here), while the store answers.
  const heartbeats = setInterval(() => {
    for (const node of nodes) void store.heartbeat(node.name, `instance-${node.name}`, node.report()).catch(() => undefined);
  }, 200);
  const a = generateApiKey();
  const b = generateApiKey();
  const now = new Date().toISOString();
  await store.createKey({ id: a.id, tenant: 'acme', hash: a.hash, createdAt: now, expiresAt: null, revokedAt: null });
  await store.createKey({ id: b.id, tenant: 'umbrella', hash: b.hash, createdAt: now, expiresAt: null, revokedAt: null });
  const gateway = await createGateway({ store, secret: TEST_SECRET, settings: { ...FAST_SETTINGS, ...settings }, logger: pino({ level: 'silent' }) });
  await gateway.start({ host: '127.0.0.1', port: 0 });
  const port = (gateway.app.server.address() as AddressInfo).port;
  return {
    store,
    nodes,
    gateway,
    url: `http://127.0.0.1:${port}`,
    port,
    keyA: a.key,
    keyB: b.key,
    keyAId: a.id,
    async seed(id, tenant, node, state = 'live') {
      await store.place(
        id,
        tenant,
        { runtime: 'container', template: 'desktop', memoryMiB: 1024, vcpus: 1 },
        nodes.filter((n) => n !== node).map((n) => n.name),
      );
      if (state === 'live') await store.confirm(id);
      else await store.end(id);
      node.sessions.set(id, tenant);
    },
    async close() {
      clearInterval(heartbeats);
      await gateway.close();
      await Promise.all(nodes.map((node) => node.close()));
    },
  };
}

export interface RawAnswer {
  status: number;
  headers: http.IncomingHttpHeaders;
  body: string;
}

/** A request with headers fetch will not send as given (Host). */
export function rawRequest(port: number, method: string, path: string, headers: Record<string, string>, body?: string): Promise<RawAnswer> {
  return new Promise((resolve, reject) => {
    const req = http.request({ host: '127.0.0.1', port, method, path, headers }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (chunk: Buffer) => chunks.push(chunk));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body: Buffer.concat(chunks).toString('utf8') }));
      res.on('error', reject);
    });
    req.on('error', reject);
    req.end(body);
  });
}
