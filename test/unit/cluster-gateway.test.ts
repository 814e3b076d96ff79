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

describe('the cost of a gateway on an action', () => {
  const store = new MemoryClusterStore();
  let cluster: Awaited<ReturnType<typeof import('../helpers/gateway-cluster.js').startCluster>>;
  before(async () => {
    const { startCluster } = await import('../helpers/gateway-cluster.js');
    // The default caches (1 s): what a deployed gateway runs with.
    cluster = await startCluster(store, ['n1'], { directoryCacheMs: 1_000, keyCacheMs: 1_000 });
    await cluster.seed('costsess01', 'acme', cluster.nodes[0]!);
  });
  after(() => cluster.close());

  /** p50 wall time and CPU time (this process: client, gateway and node) per request. */
  async function measure(url: string, headers: Record<string, string>, n: number): Promise<{ p50Ms: number; cpuMs: number }> {
    const times: number[] = [];
    const cpu = process.cpuUsage();
    for (let i = 0; i < n; i++) {
      const started = performance.now();
      const res = await fetch(url, {
        method: 'POST',
        headers: { ...headers, 'content-type': 'application/json' },
        body: '{"action":"left_click","coordinate":[10,10]}',
      });
      await res.arrayBuffer();
      assert.equal(res.status, 200);
      times.push(performance.now() - started);
    }
    const used = process.cpuUsage(cpu);
    times.sort((a, b) => a - b);
    return { p50Ms: times[Math.floor(n / 2)]!, cpuMs: (used.user + used.system) / 1000 / n };
  }

  it('costs less CPU per action than the node round trip it fronts, and reads the store about once a second', async () => {
    const { TEST_SECRET } = await import('../helpers/fake-node.js');
    const node = cluster.nodes[0]!;
    const direct = `${node.url}/v1/sessions/costsess01/actions`;
    const through = `${cluster.url}/v1/sessions/costsess01/actions`;
    const directHeaders = { 'x-sbx-cluster-secret': TEST_SECRET, 'x-sbx-tenant': 'acme' };
    const keyHeaders = { authorization: `Bearer ${cluster.keyA}` };
    await measure(direct, directHeaders, 50); // warm both paths
    await measure(through, keyHeaders, 50);
    const lookupsBefore = (store.calls.get('lookup') ?? 0) + (store.calls.get('findKey') ?? 0) + (store.calls.get('listNodes') ?? 0);
    const started = performance.now();
    // Blocks of each path in turn, compared by their medians: one block of 400 each charged a
    // collection of the first block's garbage, or a burst of other work, to one side only (the
    // ratio read 0.5 to 0.95 of the bound's 1.5 across CI runs).
    const blocks = 8;
    const n = 50;
    const controls: Array<{ p50Ms: number; cpuMs: number }> = [];
    const gateways: Array<{ p50Ms: number; cpuMs: number }> = [];
    for (let block = 0; block < blocks; block++) {
      controls.push(await measure(direct, directHeaders, n));
      gateways.push(await measure(through, keyHeaders, n));
    }
    const median = (values: number[]) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)]!;
    const control = { cpuMs: median(controls.map((c) => c.cpuMs)), p50Ms: median(controls.map((c) => c.p50Ms)) };
    const gateway = { cpuMs: median(gateways.map((g) => g.cpuMs)), p50Ms: median(gateways.map((g) => g.p50Ms)) };
    const seconds = (performance.now() - started) / 1000;
    const storeCalls = (store.calls.get('lookup') ?? 0) + (store.calls.get('findKey') ?? 0) + (store.calls.get('listNodes') ?? 0) - lookupsBefore;
    const addedCpuMs = gateway.cpuMs - control.cpuMs;
    console.log(
      `gateway cost per action: +${addedCpuMs.toFixed(3)} ms CPU (${control.cpuMs.toFixed(3)} direct, ${gateway.cpuMs.toFixed(3)} through), ` +
        `p50 ${control.p50Ms.toFixed(3)} ms direct, ${gateway.p50Ms.toFixed(3)} ms through (+${(gateway.p50Ms - control.p50Ms).toFixed(3)}); ` +
        `${storeCalls} store reads in ${seconds.toFixed(1)} s for ${blocks * n} actions (medians of ${blocks} blocks of ${n} each way)`,
    );
    // CPU, not wall time (the machine is shared), against a control measured in the same run:
    // a gateway is one more HTTP server and client in the path, so it costs about what the
    // client and the node cost together (measured in alternating blocks: +1.36 to +1.69 ms
    // against 1.14 to 1.37, +0.5 to +0.8 ms p50 wall). A per-request cost of its own (a key
    // hashed, a store read) would be many times that. The figure (<= 1 ms added
    // latency at p50) is measured by the bench on real nodes.
    assert.ok(addedCpuMs < 2 * control.cpuMs, `the gateway added ${addedCpuMs.toFixed(3)} ms of CPU per action (control ${control.cpuMs.toFixed(3)})`);
    // Three kinds of reads (key, session, nodes), each at most once per cache period (1 s), plus one each to start.
    assert.ok(storeCalls <= 3 * (Math.ceil(seconds) + 1), `${storeCalls} store reads in ${seconds.toFixed(1)} s`);
  });
});
