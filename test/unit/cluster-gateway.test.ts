/**
 * The cluster's gateway (issue 22; src/cluster/gateway/), in front of small real HTTP servers
 * standing in for nodes (test/helpers/fake-node.ts) and an in-memory store: what a client
 * sees, and what a node receives. The same file's proxy tests run against a real PostgreSQL
 * in test/cluster-gateway.test.ts.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { MemoryClusterStore } from '../helpers/memory-cluster-store.js';
import { gatewayContract } from '../helpers/gateway-contract.js';

describe('the gateway (in-memory store)', () => {
  gatewayContract(() => new MemoryClusterStore(), {
    breakStore: (store) => {
      (store as MemoryClusterStore).mode = 'hang';
      return () => ((store as MemoryClusterStore).mode = 'up');
    },
  });
});

describe('the gateway when the store fails at once', () => {
  const store = new MemoryClusterStore();
  let gateway: Awaited<ReturnType<typeof import('../helpers/gateway-cluster.js').startCluster>>;
  before(async () => {
    const { startCluster } = await import('../helpers/gateway-cluster.js');
    gateway = await startCluster(store, ['n1']);
  });
  after(() => gateway.close());

  it('answers 503 cluster_state_unavailable at once, and /healthz 503 with a reason', async () => {
    store.mode = 'fail';
    try {
      const started = performance.now();
      const res = await fetch(`${gateway.url}/v1/sessions/abcdefghij`, { headers: { authorization: `Bearer ${gateway.keyA}` } });
      assert.equal(res.status, 503);
      assert.equal(((await res.json()) as { error: { code: string } }).error.code, 'cluster_state_unavailable');
      assert.ok(performance.now() - started < 300, 'a store that fails at once is answered at once');
      const health = await fetch(`${gateway.url}/healthz`);
      assert.equal(health.status, 503);
      assert.match(((await health.json()) as { reason: string }).reason, /PostgreSQL/);
    } finally {
      store.mode = 'up';
    }
    assert.equal((await fetch(`${gateway.url}/healthz`)).status, 200);
  });
});
