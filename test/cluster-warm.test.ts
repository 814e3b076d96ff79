/**
 * Warm sandboxes in a cluster (issue 22): two equal nodes, one keeping a warm pool of the
 * template. The node heartbeats its pool's count; placement prefers it; the node claims the
 * pooled sandbox for the gateway's create, under the sandbox's own id, which the gateway
 * records in the directory (the row placed under another id is renamed). The session is
 * answered from the pool (the node's metric says `warm`, its pool is empty right after),
 * and every route reaches it through the gateway under that id. The next create, while the
 * pool refills, goes cold to the other node.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import pg from 'pg';
import { startCluster, type TestCluster } from './helpers/cluster.js';

interface NodeJson {
  name: string;
  warm: Record<string, number>;
  capacity: { sessions: number };
}

/** A counter or gauge's value in a node's /metrics (open from this machine), 0 when absent. */
async function metric(nodeUrl: string, name: string, labels: string): Promise<number> {
  const text = await (await fetch(`${nodeUrl}/metrics`)).text();
  const line = text.split('\n').find((l) => l.startsWith(`${name}{`) && labels.split(',').every((label) => l.includes(label)));
  return line === undefined ? 0 : Number(line.slice(line.lastIndexOf(' ') + 1));
}

describe('a cluster with a warm pool on one node', { timeout: 600_000 }, () => {
  let cluster: TestCluster;
  let gateway: string;

  before(async () => {
    cluster = await startCluster(
      [
        { name: 'warm', vcpus: 8, env: { SBX_WARM_POOL_SIZE: '1' } },
        { name: 'cold', vcpus: 8 },
      ],
      1,
    );
    gateway = (cluster.gateways[0] as { url: string }).url;
  });

  after(async () => {
    await cluster?.stop();
  });

  const nodes = async (): Promise<NodeJson[]> => JSON.parse((await cluster.cli(['nodes', '--json', '--db', cluster.pg.url])).stdout) as NodeJson[];
  const create = async () => {
    const started = performance.now();
    const res = await fetch(`${gateway}/v1/sessions`, {
      method: 'POST',
      headers: { ...cluster.acme, 'content-type': 'application/json' },
      body: JSON.stringify({ width: 1024, height: 768 }),
    });
    const json = (await res.json()) as { id?: string };
    return { status: res.status, id: json.id as string, ms: performance.now() - started, json };
  };

  it('the warm node reports its pool, gets the create, answers it from the pool under the pooled id; the next create goes cold elsewhere', async () => {
    const [warmNode, coldNode] = cluster.nodes as unknown as [{ url: string }, { url: string }];
    // The pool's sandbox booted and heartbeated to the registry.
    const deadline = Date.now() + 180_000;
    for (;;) {
      const warm = (await nodes()).find((n) => n.name === 'warm');
      if (warm?.warm.minimal === 1) break;
      assert.ok(Date.now() < deadline, `the warm node never reported a warm sandbox: ${JSON.stringify(await nodes())}`);
      await sleep(500);
    }
    const pooledBefore = await metric(warmNode.url, 'sandbox_warm_pool_sandboxes', 'state="ready",template="minimal"');
    assert.equal(pooledBefore, 1);

    const first = await create();
    assert.equal(first.status, 201, JSON.stringify(first.json));
    assert.equal(await metric(warmNode.url, 'sandbox_session_creates_total', 'source="warm"'), 1, 'the create was answered from the pool');
    assert.equal(await metric(warmNode.url, 'sandbox_warm_pool_sandboxes', 'state="ready",template="minimal"'), 0, 'the pool gave its sandbox');
    // The directory holds the session under the id the client got, on the warm node.
    const listed = await nodes();
    assert.equal(listed.find((n) => n.name === 'warm')?.capacity.sessions, 1);
    const shot = await fetch(`${gateway}/v1/sessions/${first.id}/screenshot`, { headers: cluster.acme });
    if (shot.status !== 200) {
      const client = new pg.Client({ connectionString: cluster.pg.url });
      await client.connect();
      const rows = (await client.query('SELECT id, tenant, node, state FROM sessions')).rows;
      await client.end();
      assert.fail(`screenshot: ${shot.status} ${await shot.text()}; created ${JSON.stringify(first.json)}; directory ${JSON.stringify(rows)}`);
    }
    assert.equal((await shot.arrayBuffer()).byteLength > 1000, true);
    const bash = await fetch(`${gateway}/v1/sessions/${first.id}/tools/bash`, {
      method: 'POST',
      headers: { ...cluster.acme, 'content-type': 'application/json' },
      body: JSON.stringify({ command: 'echo hello-from-the-pool' }),
    });
    assert.equal(bash.status, 200);
    assert.match(await bash.text(), /hello-from-the-pool/);
    // Another tenant does not see it.
    assert.equal((await fetch(`${gateway}/v1/sessions/${first.id}/screenshot`, { headers: cluster.other })).status, 404);

    // The pool is refilling (its count in the registry was taken by the first create): cold, on the other node.
    const second = await create();
    assert.equal(second.status, 201, JSON.stringify(second.json));
    assert.equal(await metric(coldNode.url, 'sandbox_session_creates_total', 'source="cold"'), 1);
    console.log(`create from the warm pool through the gateway: ${first.ms.toFixed(0)} ms; cold, on the other node: ${second.ms.toFixed(0)} ms`);

    for (const id of [first.id, second.id])
      assert.equal((await fetch(`${gateway}/v1/sessions/${id}`, { method: 'DELETE', headers: cluster.acme })).status, 200);
    const after = await nodes();
    assert.deepEqual(
      after.map((n) => n.capacity.sessions),
      [0, 0],
      JSON.stringify(after),
    );
  });
});
