/**
 * Volumes through a gateway (docs/volumes.md, "Through a cluster's gateway") in front of fake
 * nodes (test/helpers/fake-node.ts) and the in-memory store: the gateway's decisions (which
 * node, retries, quota, the 409 of volumes on two nodes, a lost node's volume) and what each
 * node receives. The same with real nodes and PostgreSQL: test/cluster-volumes.test.ts.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { startCluster, type TestCluster } from '../helpers/gateway-cluster.js';
import { MemoryClusterStore } from '../helpers/memory-cluster-store.js';

type Json = Record<string, unknown>;

describe('volumes through a gateway (fake nodes, in-memory store)', () => {
  const store = new MemoryClusterStore();
  let c: TestCluster;
  before(async () => {
    c = await startCluster(store, ['n1', 'n2'], { volumes: { minMiB: 16, maxMiB: 1024, quotaMiB: 1024, quotaCount: 3 } });
  });
  after(() => c.close());

  const call = async (method: string, url: string, body?: unknown, key = c.keyA) => {
    const res = await fetch(`${c.url}${url}`, {
      method,
      headers: { authorization: `Bearer ${key}`, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    return { status: res.status, json: (await res.json()) as Json };
  };
  const codeOf = (res: { json: Json }) => (res.json.error as { code: string }).code;
  const node = (name: string) => c.nodes.find((n) => n.name === name)!;

  it('a create goes to the least-used node, as the tenant; a failing node is left for another; a refusal is the answer and frees the name', async () => {
    const first = await call('POST', '/v1/volumes', { name: 'work', sizeMiB: 64 });
    assert.equal(first.status, 201, JSON.stringify(first.json));
    const home = store.volumes.get('acme/work')?.node as string;
    assert.equal(first.json.node, home, 'made on the node the directory names');
    assert.equal(store.volumes.get('acme/work')?.state, 'ready');
    assert.equal(node(home).volumes.get('acme/work'), 64, 'the node was asked for the caller tenant');
    const other = home === 'n1' ? 'n2' : 'n1';
    // The least-used node is now the other one; it fails: the create is made on the first one instead.
    node(other).volumeAnswer = { status: 503, code: 'host_disk_low' };
    try {
      const retried = await call('POST', '/v1/volumes', { name: 'scratch', sizeMiB: 32 });
      assert.equal(retried.status, 201, JSON.stringify(retried.json));
      assert.equal(retried.json.node, home);
      // Both fail: nobody can take it, a 503 saying what each said.
      node(home).volumeAnswer = { status: 503, code: 'host_disk_low' };
      const none = await call('POST', '/v1/volumes', { name: 'refused', sizeMiB: 32 });
      assert.deepEqual([none.status, codeOf(none)], [503, 'unavailable']);
      assert.match((none.json.error as { message: string }).message, /tried: 'n\d': HTTP 503 host_disk_low.*'n\d': HTTP 503 host_disk_low/);
      // A 4xx of the node is the client's answer, as the node gave it: no other node is asked.
      node(other).volumeAnswer = { status: 413, code: 'volume_quota_exceeded' };
      const tooBig = await call('POST', '/v1/volumes', { name: 'refused', sizeMiB: 32 });
      assert.deepEqual([tooBig.status, codeOf(tooBig)], [413, 'volume_quota_exceeded']);
      assert.equal(store.volumes.has('acme/refused'), false, 'nothing is left in the directory');
    } finally {
      node(other).volumeAnswer = undefined;
      node(home).volumeAnswer = undefined;
    }
    assert.equal(codeOf(await call('POST', '/v1/volumes', { name: 'work', sizeMiB: 64 })), 'volume_exists');
    assert.equal(codeOf(await call('POST', '/v1/volumes', { name: '../etc', sizeMiB: 64 })), 'invalid_request');
    assert.equal(codeOf(await call('POST', '/v1/volumes', { name: 'huge', sizeMiB: 4096 })), 'invalid_request');
  });

  it("the tenant's quota is the cluster's: past it, 413 before any node is asked", async () => {
    const asked = node('n1').seen.length + node('n2').seen.length;
    const third = await call('POST', '/v1/volumes', { name: 'third', sizeMiB: 16 });
    assert.equal(third.status, 201);
    const over = await call('POST', '/v1/volumes', { name: 'fourth', sizeMiB: 16 });
    assert.equal(over.status, 413);
    assert.match((over.json.error as { message: string }).message, /the tenant has 3 volumes, its quota SBX_VOLUME_QUOTA_COUNT \(3\)/);
    const seen = [...node('n1').seen, ...node('n2').seen].slice(asked).filter((r) => r.method === 'POST');
    assert.equal(seen.length, 1, 'only the third was sent to a node');
  });

  it("a session goes to its volumes' node; volumes on two nodes are a 409; another tenant's name is a 404", async () => {
    const home = store.volumes.get('acme/work')?.node as string;
    for (let i = 0; i < 4; i++) {
      const made = await call('POST', '/v1/sessions', { volumes: [{ name: 'work', path: '/home/user/data' }] });
      assert.equal(made.status, 201, JSON.stringify(made.json));
      assert.equal(made.json.node, home);
    }
    const third = store.volumes.get('acme/third')?.node as string;
    assert.notEqual(third, home, 'the third volume went to the node with fewer');
    const both = await call('POST', '/v1/sessions', {
      volumes: [
        { name: 'work', path: '/a' },
        { name: 'third', path: '/b' },
      ],
    });
    assert.equal(both.status, 409);
    assert.equal(codeOf(both), 'volumes_on_different_nodes');
    assert.match((both.json.error as { message: string }).message, new RegExp(`work on '${home}'; third on '${third}'`));
    for (const url of ['/v1/volumes/work']) {
      assert.equal(codeOf(await call('GET', url, undefined, c.keyB)), 'volume_not_found');
      assert.equal(codeOf(await call('DELETE', url, undefined, c.keyB)), 'volume_not_found');
    }
    assert.equal(codeOf(await call('POST', '/v1/sessions', { volumes: [{ name: 'work', path: '/a' }] }, c.keyB)), 'volume_not_found');
    assert.deepEqual((await call('GET', '/v1/volumes', undefined, c.keyB)).json.volumes, []);
    assert.equal(node(home).volumes.has('acme/work'), true, 'nothing of it reached a node as the other tenant');
  });

  it('a volume whose node is lost: 503 volume_unavailable, listed from the directory saying so; a delete through its node frees the name', async () => {
    const home = store.volumes.get('acme/work')?.node as string;
    const row = store.nodeRows.get(home)!;
    row.state = 'lost';
    try {
      await sleep(300); // the gateway's node list (200 ms here)
      const got = await call('GET', '/v1/volumes/work');
      assert.deepEqual([got.status, codeOf(got)], [503, 'volume_unavailable']);
      assert.match((got.json.error as { message: string }).message, new RegExp(`on node ${home}, which is not answering`));
      const listed = (await call('GET', '/v1/volumes')).json.volumes as Json[];
      assert.equal(listed.find((v) => v.name === 'work')?.unavailable, `its node ${home} is not answering`);
      assert.ok(
        listed.some((v) => v.name === 'third' && v.unavailable === undefined),
        'the others as their nodes describe them',
      );
      const placed = await call('POST', '/v1/sessions', { volumes: [{ name: 'work', path: '/a' }] });
      assert.equal(placed.status, 503, 'never placed elsewhere without its data');
      assert.match((placed.json.error as { message: string }).message, /not holding its volumes/);
    } finally {
      row.state = 'up';
    }
    await sleep(300);
    assert.equal((await call('DELETE', '/v1/volumes/third')).status, 200);
    assert.equal(store.volumes.has('acme/third'), false);
    assert.equal(codeOf(await call('GET', '/v1/volumes/third')), 'volume_not_found');
  });
});
