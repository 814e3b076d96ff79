/**
 * Volumes through a cluster (issues 22 and 25; docs/volumes.md "Through a cluster's gateway"):
 * two `sbx node`s, two `sbx gateway`s, one PostgreSQL, real runc sandboxes. A volume made
 * through gateway 1 lives on one node's disk and in the directory; a session naming it, created
 * through gateway 2, lands on that node and writes to it; a second session after the first
 * ended reads what it wrote; another tenant sees 404 everywhere; volumes on two nodes cannot
 * be mounted together; a delete frees the name cluster-wide.
 */
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { stat } from 'node:fs/promises';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import pg from 'pg';
import { startCluster, type TestCluster } from './helpers/cluster.js';

type Json = Record<string, unknown>;

describe('volumes through a cluster: two nodes, two gateways, one PostgreSQL', { timeout: 600_000 }, () => {
  let cluster: TestCluster;
  let g1: string;
  let g2: string;
  let db: pg.Client;

  const api = async (base: string, method: string, url: string, headers: Record<string, string>, body?: unknown) => {
    const res = await fetch(`${base}${url}`, {
      method,
      headers: { ...headers, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    return { status: res.status, json: (await res.json()) as Json };
  };
  const errorOf = (res: { json: Json }) => res.json.error as { code: string; message: string };
  const bash = async (base: string, id: string, command: string): Promise<string> => {
    const res = await api(base, 'POST', `/v1/sessions/${id}/tools/bash`, cluster.acme, { command });
    assert.equal(res.status, 200, JSON.stringify(res.json));
    return (res.json.content as Array<{ text?: string }>).map((c) => c.text ?? '').join('');
  };
  /** Where the directory says a session or a volume is (what the client never sees nor chooses). */
  const nodeOfSession = async (id: string) => (await db.query<{ node: string }>('SELECT node FROM sessions WHERE id = $1', [id])).rows[0]?.node;
  const volumeRow = async (tenant: string, name: string) =>
    (await db.query<{ node: string; state: string }>('SELECT node, state FROM volumes WHERE tenant = $1 AND name = $2', [tenant, name])).rows[0];
  const volumeFile = (stateDir: string, tenant: string, name: string) =>
    path.join(stateDir, 'volumes', createHash('sha256').update(tenant).digest('hex').slice(0, 32), `${name}.ext4`);

  before(async () => {
    cluster = await startCluster(
      [
        { name: 'n1', vcpus: 8 },
        { name: 'n2', vcpus: 8 },
      ],
      2,
    );
    [g1, g2] = cluster.gateways.map((g) => g.url) as [string, string];
    db = new pg.Client({ connectionString: cluster.pg.url });
    await db.connect();
  });

  after(async () => {
    await db?.end();
    await cluster?.stop();
  });

  it('a volume made through gateway 1 is mounted, written and read again by sessions made through gateway 2 on its node', async (t) => {
    let started = performance.now();
    const made = await api(g1, 'POST', '/v1/volumes', cluster.acme, { name: 'work', sizeMiB: 64 });
    t.diagnostic(`volume create (64 MiB) through a gateway: ${(performance.now() - started).toFixed(0)} ms`);
    assert.equal(made.status, 201, JSON.stringify(made.json));
    assert.equal(made.json.name, 'work');
    const row = await volumeRow('acme', 'work');
    assert.equal(row?.state, 'ready');
    const home = cluster.nodes.find((n) => n.name === row?.node);
    assert.ok(home, 'the directory names one of the nodes');
    await stat(volumeFile(home.stateDir, 'acme', 'work')); // its file is on that node's disk...
    const elsewhere = cluster.nodes.find((n) => n !== home)!;
    await assert.rejects(stat(volumeFile(elsewhere.stateDir, 'acme', 'work')), /ENOENT/, '...and on no other');
    // The same name through the other gateway: taken cluster-wide.
    assert.equal(errorOf(await api(g2, 'POST', '/v1/volumes', cluster.acme, { name: 'work', sizeMiB: 64 })).code, 'volume_exists');
    // Described by its node through either gateway.
    const described = await api(g2, 'GET', '/v1/volumes/work', cluster.acme);
    assert.equal(described.status, 200);
    assert.deepEqual([described.json.sizeMiB, described.json.mountedBy], [64, []]);

    started = performance.now();
    const first = await api(g2, 'POST', '/v1/sessions', cluster.acme, { volumes: [{ name: 'work', path: '/home/user/data' }] });
    t.diagnostic(`session create with the volume through the other gateway: ${(performance.now() - started).toFixed(0)} ms`);
    assert.equal(first.status, 201, JSON.stringify(first.json));
    const firstId = first.json.id as string;
    assert.equal(await nodeOfSession(firstId), home.name, "the session is placed on the volume's node");
    assert.match(await bash(g1, firstId, 'echo written-by-the-first-session > /home/user/data/note.txt && sync && echo done'), /done/);
    assert.deepEqual((await api(g1, 'GET', '/v1/volumes/work', cluster.acme)).json.mountedBy, [{ sessionId: firstId, readOnly: false }]);
    // The node's own rule holds through the gateway: a mounted volume cannot be deleted.
    assert.equal(errorOf(await api(g2, 'DELETE', '/v1/volumes/work', cluster.acme)).code, 'volume_in_use');
    assert.equal((await api(g1, 'DELETE', `/v1/sessions/${firstId}`, cluster.acme)).status, 200);

    const second = await api(g2, 'POST', '/v1/sessions', cluster.acme, { volumes: [{ name: 'work', path: '/mnt/work', readOnly: true }] });
    assert.equal(second.status, 201, JSON.stringify(second.json));
    const secondId = second.json.id as string;
    assert.equal(await nodeOfSession(secondId), home.name);
    assert.match(await bash(g2, secondId, 'cat /mnt/work/note.txt'), /written-by-the-first-session/);
    assert.equal((await api(g1, 'DELETE', `/v1/sessions/${secondId}`, cluster.acme)).status, 200);
  });

  it("another tenant's key sees 404 for the volume on every route, and cannot mount it", async () => {
    const other = cluster.other;
    for (const base of [g1, g2]) {
      assert.equal(errorOf(await api(base, 'GET', '/v1/volumes/work', other)).code, 'volume_not_found');
      assert.equal(errorOf(await api(base, 'DELETE', '/v1/volumes/work', other)).code, 'volume_not_found');
      assert.deepEqual((await api(base, 'GET', '/v1/volumes', other)).json.volumes, []);
      const mount = await api(base, 'POST', '/v1/sessions', other, { volumes: [{ name: 'work', path: '/home/user/data' }] });
      assert.equal(mount.status, 404);
      assert.equal(errorOf(mount).code, 'volume_not_found');
    }
    // Its own volume of the same name is another volume.
    const own = await api(g1, 'POST', '/v1/volumes', other, { name: 'work', sizeMiB: 32 });
    assert.equal(own.status, 201, JSON.stringify(own.json));
    assert.equal((await api(g2, 'GET', '/v1/volumes/work', cluster.acme)).json.sizeMiB, 64, "acme's is unchanged");
    assert.equal((await api(g2, 'DELETE', '/v1/volumes/work', other)).status, 200);
    assert.equal(await volumeRow('other', 'work'), undefined);
    assert.ok(await volumeRow('acme', 'work'));
  });

  it('the next volume goes to the least-used node; volumes on two nodes cannot be mounted together; a delete frees the name', async () => {
    const work = await volumeRow('acme', 'work');
    const made = await api(g2, 'POST', '/v1/volumes', cluster.acme, { name: 'scratch', sizeMiB: 32 });
    assert.equal(made.status, 201, JSON.stringify(made.json));
    const scratch = await volumeRow('acme', 'scratch');
    assert.notEqual(scratch?.node, work?.node, 'the node without a volume takes it');
    const listed = await api(g1, 'GET', '/v1/volumes', cluster.acme);
    assert.deepEqual(
      (listed.json.volumes as Json[]).map((v) => [v.name, v.sizeMiB]),
      [
        ['scratch', 32],
        ['work', 64],
      ],
    );
    // A session on scratch's node: the other one than work's, so placement is not luck.
    const onScratch = await api(g1, 'POST', '/v1/sessions', cluster.acme, { volumes: [{ name: 'scratch', path: '/home/user/scratch' }] });
    assert.equal(onScratch.status, 201, JSON.stringify(onScratch.json));
    assert.equal(await nodeOfSession(onScratch.json.id as string), scratch?.node);
    assert.equal((await api(g2, 'DELETE', `/v1/sessions/${onScratch.json.id as string}`, cluster.acme)).status, 200);

    const both = await api(g1, 'POST', '/v1/sessions', cluster.acme, {
      volumes: [
        { name: 'work', path: '/home/user/work' },
        { name: 'scratch', path: '/home/user/scratch' },
      ],
    });
    assert.equal(both.status, 409);
    assert.equal(errorOf(both).code, 'volumes_on_different_nodes');
    assert.match(
      errorOf(both).message,
      new RegExp(`work on '${work?.node}'.*scratch on '${scratch?.node}'|scratch on '${scratch?.node}'.*work on '${work?.node}'`),
    );
    const unknown = await api(g2, 'POST', '/v1/sessions', cluster.acme, { volumes: [{ name: 'nope', path: '/home/user/data' }] });
    assert.deepEqual([unknown.status, errorOf(unknown).code], [404, 'volume_not_found']);

    const deleted = await api(g1, 'DELETE', '/v1/volumes/scratch', cluster.acme);
    assert.equal(deleted.status, 200, JSON.stringify(deleted.json));
    assert.equal(await volumeRow('acme', 'scratch'), undefined, 'the directory forgets it');
    assert.equal(errorOf(await api(g2, 'GET', '/v1/volumes/scratch', cluster.acme)).code, 'volume_not_found');
    const node = cluster.nodes.find((n) => n.name === scratch?.node)!;
    await assert.rejects(stat(volumeFile(node.stateDir, 'acme', 'scratch')), /ENOENT/, 'its file is gone from its node');
    // The name is free again, on whichever node is least used now.
    assert.equal((await api(g2, 'POST', '/v1/volumes', cluster.acme, { name: 'scratch', sizeMiB: 16 })).status, 201);
  });
});
