/**
 * The cluster's state in a real PostgreSQL 15 (issue 22): a server of this file's own
 * (test/helpers/postgres.ts), a fresh database per test, and real concurrency: every
 * "gateway" below is a PgClusterStore with its own pool, so their transactions run on
 * separate connections at once, as they would from separate processes.
 */
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, describe, it } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import pg from 'pg';
import { generateApiKey } from '../src/api/auth/api-key.js';
import type { PlacementRequest } from '../src/cluster/placement.js';
import { NodeNameTakenError, type NodeReport } from '../src/cluster/store/cluster-store.js';
import { Db } from '../src/cluster/store/db.js';
import { ClusterStateUnavailableError } from '../src/cluster/store/errors.js';
import { migrate, MIGRATIONS } from '../src/cluster/store/migrations.js';
import { PgClusterStore, type PgClusterStoreSettings } from '../src/cluster/store/pg-cluster-store.js';
import { startPostgres } from './helpers/postgres.js';
import { watchUncaught } from './helpers/uncaught-guard.js';
import { httpStatusOf } from '../src/api/errors.js';
import { OrchestratorError } from '../src/errors.js';

const server = await startPostgres();
const uncaught = watchUncaught();
const opened: Array<{ close(): Promise<void> }> = [];
after(async () => {
  await Promise.allSettled(opened.map((store) => store.close()));
  uncaught.assertNone();
});

let databases = 0;
/** A database of the test's own on the file's server. */
async function freshDatabase(): Promise<string> {
  const name = `t${++databases}`;
  const admin = new pg.Client({ connectionString: server.url });
  await admin.connect();
  await admin.query(`CREATE DATABASE ${name}`);
  await admin.end();
  return server.url.replace(/\/postgres$/, `/${name}`);
}

function storeOn(url: string, settings: Partial<PgClusterStoreSettings> = {}): PgClusterStore {
  const store = new PgClusterStore({ url, ...settings });
  opened.push(store);
  return store;
}

async function migratedStore(settings: Partial<PgClusterStoreSettings> = {}): Promise<{ url: string; store: PgClusterStore }> {
  const url = await freshDatabase();
  const store = storeOn(url, settings);
  await store.migrate();
  return { url, store };
}

function report(overrides: Partial<NodeReport> = {}): NodeReport {
  return {
    url: 'http://127.0.0.1:1',
    runtimes: ['container'],
    templates: ['minimal'],
    warm: {},
    maxSessions: 10,
    memoryMiB: 16_384,
    vcpus: 16,
    sessionMemoryMiB: 1024,
    sessionVcpus: 1,
    version: '0.1.0',
    ...overrides,
  };
}

const CREATE: PlacementRequest = { runtime: 'container', template: 'minimal', memoryMiB: 1024, vcpus: 1 };

/** Each node's commitment as the directory has it, against the counters on its row. */
async function assertCommitmentMatchesDirectory(url: string): Promise<void> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    const { rows } = await client.query<{
      name: string;
      counted: number;
      memory: number;
      vcpus: string;
      sessions: number;
      committed_memory_mib: number;
      committed_vcpus: string;
    }>(
      `SELECT n.name, n.sessions, n.committed_memory_mib, n.committed_vcpus,
              count(s.id)::integer AS counted, coalesce(sum(s.memory_mib), 0)::integer AS memory, coalesce(sum(s.vcpus), 0) AS vcpus
       FROM nodes n LEFT JOIN sessions s ON s.node = n.name AND s.state IN ('creating', 'live') AND n.state = 'up'
       GROUP BY n.name ORDER BY n.name`,
    );
    for (const row of rows) {
      assert.deepEqual(
        { sessions: row.sessions, memory: row.committed_memory_mib, vcpus: Number(row.committed_vcpus) },
        { sessions: row.counted, memory: row.memory, vcpus: Number(row.vcpus) },
        `node ${row.name}: its counters and its directory rows disagree`,
      );
    }
  } finally {
    await client.end();
  }
}

describe('cluster store on PostgreSQL', () => {
  it('migrations raced by 8 processes starting together run exactly once, without an error', async () => {
    const url = await freshDatabase();
    const racers = Array.from({ length: 8 }, () => new Db({ url }));
    opened.push(...racers);
    const applied = await Promise.all(racers.map((db) => migrate(db)));
    assert.deepEqual(
      applied.flat(),
      MIGRATIONS.map((migration) => migration.version),
      'each migration applied by exactly one racer',
    );
    assert.equal(applied.filter((versions) => versions.length > 0).length, 1);
    const { rows } = await (racers[0] as Db).query<{ version: number }>('test', 'SELECT version FROM schema_migrations ORDER BY version');
    assert.deepEqual(
      rows.map((row) => row.version),
      MIGRATIONS.map((migration) => migration.version),
    );
    // And a store started later finds nothing to do.
    assert.deepEqual(await migrate(racers[0] as Db), []);
  });

  it('two gateways placing onto a node with room for one at once: exactly one wins (40 rounds, 8 gateways)', async () => {
    const { url, store } = await migratedStore();
    const gateways = Array.from({ length: 8 }, () => storeOn(url));
    for (let round = 0; round < 40; round++) {
      const node = `one-${round}`;
      await store.registerNode(node, randomUUID(), report({ maxSessions: 1 }));
      const outcomes = await Promise.all(gateways.map((gateway, i) => gateway.place(`s-${round}-${i}`, 'acme', CREATE, [])));
      const winners = outcomes.filter((outcome) => outcome.placed);
      assert.equal(winners.length, 1, `round ${round}: ${winners.length} placements won a node with room for one`);
      for (const outcome of outcomes) {
        if (!outcome.placed) assert.match(outcome.reason, /at their session limit|filled up while this create was placed/);
      }
      assert.equal((await store.sessionsOfNode(node)).length, 1);
      await store.setDraining(node, true); // out of the next rounds
    }
    await assertCommitmentMatchesDirectory(url);
  });

  it('50 placements at once from 5 gateways onto 3 nodes never exceed any node, and fill the cluster exactly', async () => {
    const { url, store } = await migratedStore();
    // Limits by sessions, by memory and by vCPUs: 5 + 8 + 10 = 23 creates fit.
    await store.registerNode('small', randomUUID(), report({ maxSessions: 5 }));
    await store.registerNode('memory', randomUUID(), report({ maxSessions: 50, memoryMiB: 8 * 1024 }));
    await store.registerNode('cpu', randomUUID(), report({ maxSessions: 50, vcpus: 10 }));
    const gateways = Array.from({ length: 5 }, () => storeOn(url, { maxConnections: 10 }));
    const outcomes = await Promise.all(Array.from({ length: 50 }, (_, i) => (gateways[i % 5] as PgClusterStore).place(`c-${i}`, 'acme', CREATE, [])));
    const placed = outcomes.filter((outcome) => outcome.placed).length;
    const nodes = await store.listNodes();
    const byName = Object.fromEntries(nodes.map((node) => [node.name, node.capacity]));
    assert.equal(byName.small?.sessions, 5);
    assert.equal(byName.memory?.memoryMiB.committed, 8 * 1024);
    assert.equal(byName.cpu?.vcpus.committed, 10);
    assert.equal(placed, 23, 'every create that fits was placed, and no more');
    for (const node of nodes) assert.ok((await store.sessionsOfNode(node.name)).length <= (node.name === 'small' ? 5 : node.name === 'memory' ? 8 : 10));
    await assertCommitmentMatchesDirectory(url);
    // Released and ended sessions give their size back; a second end changes nothing.
    const first = (await store.sessionsOfNode('small'))[0]?.sessionId as string;
    await store.confirm(first);
    assert.equal((await store.lookup(first))?.state, 'live');
    await store.end(first);
    await store.end(first);
    await store.release((await store.sessionsOfNode('cpu'))[0]?.sessionId as string);
    assert.equal((await store.getNode('small'))?.capacity.sessions, 4);
    assert.equal((await store.getNode('cpu'))?.capacity.vcpus.committed, 9);
    assert.equal((await store.lookup(first))?.state, 'ended');
    await assertCommitmentMatchesDirectory(url);
  });

  it("one gateway's concurrent creates count each other's choices: 30 creates, 6 at a time, onto 8, 16 and 24 vCPUs land 5/10/15", async () => {
    const { store } = await migratedStore();
    for (const [name, vcpus] of [
      ['eight', 8],
      ['sixteen', 16],
      ['twentyfour', 24],
    ] as const) {
      await store.registerNode(name, randomUUID(), report({ vcpus, maxSessions: 100, memoryMiB: 1024 * 1024 }));
    }
    for (let wave = 0; wave < 5; wave++) {
      const outcomes = await Promise.all(Array.from({ length: 6 }, (_, i) => store.place(`w-${wave}-${i}`, 'acme', CREATE, [])));
      assert.ok(outcomes.every((outcome) => outcome.placed));
    }
    const counts = Object.fromEntries((await store.listNodes()).map((node) => [node.name, node.capacity.sessions]));
    assert.deepEqual(counts, { eight: 5, sixteen: 10, twentyfour: 15 }, 'a wave herded onto one node');
  });

  it('nodes silent too long are marked lost once, with their sessions, even by 4 gateways at once', async () => {
    const { url, store } = await migratedStore();
    await store.registerNode('alive', 'a1', report());
    await store.registerNode('silent', 's1', report());
    const sessions: string[] = [];
    for (let i = 0; i < 6; i++) {
      const id = `l-${i}`;
      const outcome = await store.place(id, 'acme', CREATE, []);
      assert.ok(outcome.placed);
      sessions.push(id);
    }
    const silentSessions = (await store.sessionsOfNode('silent')).map((entry) => entry.sessionId);
    assert.ok(silentSessions.length > 0, 'placement used both nodes');
    const silentSince = (await store.getNode('silent'))?.lastHeartbeat as Date;
    await sleep(300);
    assert.equal(await store.heartbeat('alive', 'a1', report()), 'ok');
    // 200 ms of silence is "too long" for this sweep: 'silent' has been quiet 300 ms, 'alive' not.
    const gateways = Array.from({ length: 4 }, () => storeOn(url));
    const swept = await Promise.all(gateways.map((gateway) => gateway.markLostNodes(200)));
    assert.deepEqual(swept.flat(), ['silent'], 'marked exactly once in all');
    assert.deepEqual(await store.markLostNodes(200), [], 'idempotent');
    const node = await store.getNode('silent');
    assert.equal(node?.state, 'lost');
    assert.equal(node?.healthy, false);
    assert.equal(node?.capacity.sessions, 0);
    for (const id of silentSessions) {
      const entry = await store.lookup(id);
      assert.equal(entry?.state, 'lost');
      assert.equal(entry?.reason, `node 'silent' stopped answering at ${silentSince.toISOString()} (its last heartbeat)`);
    }
    for (const entry of await store.sessionsOfNode('alive')) assert.equal(entry.state, 'creating');
    // A lost node is told so; placement leaves it out; re-registering brings it back empty.
    assert.equal(await store.heartbeat('silent', 's1', report()), 'lost');
    const onlyAlive = await store.place('after-loss', 'acme', CREATE, []);
    assert.ok(onlyAlive.placed && onlyAlive.node.name === 'alive');
    await store.setDraining('alive', true);
    const nobody = await store.place('nobody', 'acme', CREATE, []);
    assert.ok(!nobody.placed);
    assert.match(nobody.reason, /of 2 nodes, 1 not heartbeating, 1 draining/);
    await store.registerNode('silent', 's2', report());
    assert.equal((await store.getNode('silent'))?.state, 'up');
    assert.equal((await store.lookup(silentSessions[0] as string))?.state, 'lost', 'a lost session stays lost');
    // Ending or releasing a lost session gives nothing back (it no longer counted).
    await store.end(silentSessions[0] as string);
    await store.release(silentSessions[0] as string);
    assert.equal((await store.getNode('silent'))?.capacity.sessions, 0);
    await assertCommitmentMatchesDirectory(url);
  });

  it('an operator removes a lost node: its sessions, routes and volumes leave the directory; a node that is not lost is refused; one that comes back registers anew', async () => {
    const { url, store } = await migratedStore();
    await store.registerNode('kept', 'k1', report());
    await store.registerNode('gone', 'g1', report());
    const quota = { count: 3, mib: 1000 };
    const reserved = await store.reserveVolume({ tenant: 'acme', name: 'work', sizeMiB: 100, runtime: 'container', quota }, ['kept']);
    assert.ok(reserved.reserved && reserved.node === 'gone');
    await store.confirmVolume('acme', 'work');
    const placed = await store.place('on-gone', 'acme', CREATE, ['kept']);
    assert.ok(placed.placed && placed.node.name === 'gone');
    await store.confirm('on-gone');
    await store.recordViewToken(Buffer.alloc(32, 1), 'on-gone', new Date(Date.now() + 60_000));
    await store.recordRun('run-1', 'on-gone');
    assert.deepEqual(await store.removeNode('gone'), { removed: false, why: 'not_lost' }, 'a node that heartbeats is never removed');
    assert.deepEqual(await store.removeNode('nope'), { removed: false, why: 'missing' });
    await sleep(300);
    await store.heartbeat('kept', 'k1', report());
    assert.deepEqual(await store.markLostNodes(200), ['gone']);
    assert.deepEqual(await store.removeNode('gone'), { removed: true, sessions: 1, volumes: 1 });
    assert.equal(await store.lookup('on-gone'), undefined, 'the session is unknown now (404), not lost');
    assert.equal(await store.lookupVolume('acme', 'work'), undefined);
    assert.equal(await store.lookupViewToken(Buffer.alloc(32, 1)), undefined);
    assert.equal(await store.lookupRun('run-1'), undefined);
    assert.deepEqual(
      (await store.listNodes()).map((node) => node.name),
      ['kept'],
    );
    // The name is free for the tenant again, on a node that is there.
    const again = await store.reserveVolume({ tenant: 'acme', name: 'work', sizeMiB: 100, runtime: 'container', quota }, []);
    assert.ok(again.reserved && again.node === 'kept');
    // The removed node comes back after all: told it is lost (so it reconciles), then a new member, empty.
    assert.equal(await store.heartbeat('gone', 'g1', report()), 'lost');
    await store.registerNode('gone', 'g2', report());
    assert.equal((await store.getNode('gone'))?.state, 'up');
    assert.equal((await store.getNode('gone'))?.capacity.sessions, 0);
    await assertCommitmentMatchesDirectory(url);
  });

  it('a name held by a live instance cannot be registered by another; a stale holder is replaced and its heartbeat refused', async () => {
    const { store } = await migratedStore({ staleMs: 500 });
    await store.registerNode('n1', 'first', report());
    await assert.rejects(store.registerNode('n1', 'forger', report({ url: 'http://127.0.0.1:9' })), (error: unknown) => {
      assert.ok(error instanceof NodeNameTakenError);
      assert.equal(error.code, 'node_name_taken');
      assert.match(error.message, /held by another running instance/);
      return true;
    });
    assert.equal((await store.getNode('n1'))?.url, 'http://127.0.0.1:1', 'the forged registration changed nothing');
    assert.equal(await store.heartbeat('n1', 'first', report()), 'ok');
    // Two claimants at once on a stale name: one wins, the other is refused.
    await sleep(700);
    const claims = await Promise.allSettled([store.registerNode('n1', 'second', report()), store.registerNode('n1', 'third', report())]);
    assert.equal(claims.filter((claim) => claim.status === 'fulfilled').length, 1);
    const rejected = claims.find((claim) => claim.status === 'rejected');
    assert.ok(rejected && rejected.status === 'rejected' && rejected.reason instanceof NodeNameTakenError);
    assert.equal(await store.heartbeat('n1', 'first', report()), 'replaced');
    assert.equal(await store.heartbeat('unknown', 'x', report()), 'lost');
    // A report that makes no sense is refused before it reaches the table.
    await assert.rejects(store.registerNode('n2', 'i', report({ maxSessions: -1 })), /maxSessions must be a number >= 0/);
  });

  it("a node that stops heartbeating is left out at once, before any sweep marks it lost (each gateway's view judges on PostgreSQL's clock)", async () => {
    const { url, store } = await migratedStore({ staleMs: 600 });
    const gateway = storeOn(url, { staleMs: 600 });
    await store.registerNode('quiet', 'q', report());
    await store.registerNode('talking', 't', report());
    const first = await gateway.place('h-0', 'acme', CREATE, []); // the gateway's view is filled now
    assert.ok(first.placed);
    await sleep(400);
    await store.heartbeat('talking', 't', report());
    await sleep(400); // 'quiet' silent 800 ms (> 600), 'talking' 400 ms
    for (let i = 1; i <= 6; i++) {
      const outcome = await gateway.place(`h-${i}`, 'acme', CREATE, []);
      assert.ok(outcome.placed && outcome.node.name === 'talking', `create ${i} went to a silent node`);
    }
    await sleep(700);
    const nobody = await gateway.place('h-none', 'acme', CREATE, []);
    assert.ok(!nobody.placed);
    assert.match(nobody.reason, /of 2 nodes, 2 not heartbeating/);
    // A heartbeat after the silence: placed on again at once, no sweep, no full read waited for.
    assert.equal(await store.heartbeat('quiet', 'q', report()), 'ok');
    const back = await gateway.place('h-back', 'acme', CREATE, []);
    assert.ok(back.placed && back.node.name === 'quiet');
  });

  it('a drained node takes no new sessions; undrained, it does again', async () => {
    const { store } = await migratedStore();
    await store.registerNode('a', 'ia', report());
    await store.registerNode('b', 'ib', report());
    assert.equal(await store.setDraining('a', true), true);
    assert.equal(await store.setDraining('nope', true), false);
    for (let i = 0; i < 8; i++) {
      const outcome = await store.place(`d-${i}`, 'acme', CREATE, []);
      assert.ok(outcome.placed);
      assert.equal(outcome.node.name, 'b');
    }
    assert.equal((await store.getNode('a'))?.draining, true);
    const excluded = await store.place('excluded', 'acme', CREATE, ['b']);
    assert.ok(!excluded.placed);
    assert.match(excluded.reason, /1 already failed this create, 1 draining/);
    await store.setDraining('a', false);
    const back = await store.place('back', 'acme', CREATE, ['b']);
    assert.ok(back.placed && back.node.name === 'a');
  });

  it('heartbeats carry the report: a new template or warm count is placed on at once', async () => {
    const { store } = await migratedStore();
    await store.registerNode('n', 'i', report());
    const desktop = { ...CREATE, template: 'desktop' };
    const before = await store.place('w-1', 'acme', desktop, []);
    assert.ok(!before.placed);
    assert.match(before.reason, /without the template 'desktop' built/);
    await store.heartbeat('n', 'i', report({ templates: ['minimal', 'desktop'], warm: { desktop: 2 } }));
    const afterBuild = await store.place('w-2', 'acme', desktop, []);
    assert.ok(afterBuild.placed);
    // One of the two is counted as taken by this create, until the node's next heartbeat.
    assert.deepEqual(afterBuild.node.warm, { desktop: 1 });
    const next = await store.place('w-3', 'acme', desktop, []);
    assert.ok(next.placed);
    assert.deepEqual(next.node.warm, { desktop: 0 });
    const cold = await store.place('w-4', 'acme', desktop, []);
    assert.ok(cold.placed);
    assert.deepEqual(cold.node.warm, { desktop: 0 }, 'never below zero');
    await store.heartbeat('n', 'i', report({ templates: ['minimal', 'desktop'], warm: { desktop: 1 } }));
    assert.deepEqual((await store.getNode('n'))?.warm, { desktop: 1 });
  });

  it("a session id the directory holds already: place() refuses it (session_id_taken) and writes nothing; a warm sandbox's id renames the row at confirm", async () => {
    const { url, store } = await migratedStore();
    await store.registerNode('n', 'i', report());
    const first = await store.place('dup-1', 'acme', CREATE, []);
    assert.ok(first.placed);
    await assert.rejects(store.place('dup-1', 'other', CREATE, []), (err: unknown) => {
      assert.ok(err instanceof OrchestratorError);
      assert.equal(err.code, 'session_id_taken');
      assert.equal(httpStatusOf(err.code), 409);
      return true;
    });
    assert.equal((await store.getNode('n'))?.capacity.sessions, 1, 'the refused create counts nowhere');
    assert.equal((await store.lookup('dup-1'))?.tenant, 'acme');
    await assertCommitmentMatchesDirectory(url);
    // The node answered under the id of the warm sandbox it claimed: the same row, renamed.
    await store.confirm('dup-1', 'pooled-1');
    assert.equal(await store.lookup('dup-1'), undefined);
    const renamed = await store.lookup('pooled-1');
    assert.equal(renamed?.state, 'live');
    assert.equal(renamed?.tenant, 'acme');
    assert.equal(renamed?.node, 'n');
    await store.end('pooled-1');
    assert.equal((await store.getNode('n'))?.capacity.sessions, 0);
    await assertCommitmentMatchesDirectory(url);
  });

  it('a confirm is committed without waiting for its WAL to be written (its transaction alone); placements wait', async () => {
    const { url, store } = await migratedStore();
    await store.registerNode('n', 'i', report({ maxSessions: 100, memoryMiB: 200_000, vcpus: 200 }));
    const client = new pg.Client({ connectionString: url });
    await client.connect();
    try {
      // A backend's WAL statistics are published when it exits: each phase on a store of its own, closed after.
      const writes = async () => Number((await client.query<{ wal_write: string }>('SELECT wal_write FROM pg_stat_wal')).rows[0]?.wal_write);
      const phase = async (run: (s: PgClusterStore) => Promise<void>): Promise<number> => {
        const own = new PgClusterStore({ url, maxConnections: 1 });
        const before = await writes();
        try {
          await run(own);
        } finally {
          await own.close();
        }
        await sleep(300); // the backend's exit
        return (await writes()) - before;
      };
      const placing = await phase(async (s) => {
        for (let i = 0; i < 40; i++) assert.ok((await s.place(`f-${i}`, 'acme', CREATE, [])).placed);
      });
      const confirming = await phase(async (s) => {
        for (let i = 0; i < 40; i++) await s.confirm(`f-${i}`);
      });
      const mixed = await phase(async (s) => {
        await s.confirm('none');
        for (let i = 0; i < 20; i++) assert.ok((await s.place(`g-${i}`, 'acme', CREATE, [])).placed);
      });
      console.log(`WAL writes: 40 placements ${placing}, 40 confirms ${confirming}, a confirm then 20 placements on its connection ${mixed}`);
      assert.ok(placing >= 40, `placements wait for their WAL: ${placing}`);
      assert.ok(confirming < 10, `confirms waited for their WAL: ${confirming}`);
      assert.ok(mixed >= 20, `the setting outlived the confirm's transaction: ${mixed}`);
      assert.equal((await store.lookup('f-39'))?.state, 'live');
    } finally {
      await client.end();
    }
  });

  it('a confirm updates its row in place (a HOT update: no index names what it changes)', async () => {
    const { url, store } = await migratedStore();
    await store.registerNode('n', 'i', report({ maxSessions: 100, memoryMiB: 200_000, vcpus: 200 }));
    for (let i = 0; i < 40; i++) assert.ok((await store.place(`h-${i}`, 'acme', CREATE, [], { maxSessionsPerTenant: 1000 })).placed);
    const client = new pg.Client({ connectionString: url });
    await client.connect();
    try {
      // A backend's table statistics are published when it exits: the confirms on a store of their own, closed after.
      const updates = async () =>
        (await client.query<{ all: string; hot: string }>(`SELECT n_tup_upd AS all, n_tup_hot_upd AS hot FROM pg_stat_user_tables WHERE relname = 'sessions'`))
          .rows[0];
      const before = await updates();
      const own = new PgClusterStore({ url, maxConnections: 1 });
      try {
        for (let i = 0; i < 40; i++) await own.confirm(`h-${i}`);
      } finally {
        await own.close();
      }
      let after = await updates();
      for (let i = 0; i < 20 && Number(after?.all) - Number(before?.all) < 40; i++) {
        await sleep(100);
        after = await updates();
      }
      const all = Number(after?.all) - Number(before?.all);
      const hot = Number(after?.hot) - Number(before?.hot);
      console.log(`40 confirms: ${all} row updates, ${hot} of them in place (HOT)`);
      assert.equal(all, 40);
      assert.equal(hot, 40, 'every confirm wrote new index entries');
      assert.equal((await store.lookup('h-39'))?.state, 'live');
      // The tenant's open sessions are still counted (by the index on ended_at).
      await assert.rejects(store.place('h-over', 'acme', CREATE, [], { maxSessionsPerTenant: 40 }), /tenant "acme" has 40 sessions/);
    } finally {
      await client.end();
    }
  });

  it("a tenant's session limit counts its sessions on every node: past it, 429 tenant_session_limit and nothing written", async () => {
    const { url, store } = await migratedStore();
    await store.registerNode('a', 'ia', report());
    await store.registerNode('b', 'ib', report());
    const limits = { maxSessionsPerTenant: 3 };
    const placedOn: string[] = [];
    for (let i = 0; i < 3; i++) {
      const outcome = await store.place(`l-${i}`, 'acme', CREATE, [], limits);
      assert.ok(outcome.placed);
      placedOn.push(outcome.node.name);
    }
    assert.deepEqual([...new Set(placedOn)].sort(), ['a', 'b'], "the limit is the cluster's, not a node's");
    await assert.rejects(store.place('l-over', 'acme', CREATE, [], limits), (err: unknown) => {
      assert.ok(err instanceof OrchestratorError);
      assert.equal(httpStatusOf(err.code), 429);
      assert.equal(err.code, 'tenant_session_limit');
      assert.match(err.message, /tenant "acme" has 3 sessions in the cluster, its limit \(SBX_MAX_SESSIONS_PER_TENANT=3\)/);
      assert.equal(err.retryAfterSeconds, 10);
      return true;
    });
    assert.equal(await store.lookup('l-over'), undefined);
    assert.ok((await store.place('o-0', 'other', CREATE, [], limits)).placed, 'another tenant is not limited by it');
    await store.end('l-0');
    assert.ok((await store.place('l-again', 'acme', CREATE, [], limits)).placed, 'an ended session counts no more');
    assert.ok((await store.place('l-unlimited', 'acme', CREATE, [])).placed, 'no limit given: none checked');
    await assertCommitmentMatchesDirectory(url);
  });

  it("volumes: a name is taken once by gateways racing for it, on the least-used node, within the tenant's quota; a create is placed only where its volumes are", async () => {
    const { url, store } = await migratedStore();
    await store.registerNode('a', 'ia', report());
    await store.registerNode('b', 'ib', report());
    await store.registerNode('vm', 'ivm', report({ runtimes: ['qemu'] }));
    const quota = { count: 3, mib: 1000 };
    const volume = (tenant: string, name: string, sizeMiB = 100) => ({ tenant, name, sizeMiB, runtime: 'container' as const, quota });
    const gateways = Array.from({ length: 8 }, () => storeOn(url));
    const raced = await Promise.all(gateways.map((gateway) => gateway.reserveVolume(volume('acme', 'work'), [])));
    assert.equal(raced.filter((outcome) => outcome.reserved).length, 1, 'exactly one gateway takes the name');
    for (const outcome of raced) if (!outcome.reserved) assert.equal(outcome.why, 'exists');
    const work = await store.lookupVolume('acme', 'work');
    assert.equal(work?.state, 'creating', 'not mountable until its node made it');
    assert.notEqual(work?.node, 'vm', 'never a node without the runtime');
    await store.confirmVolume('acme', 'work');
    const second = await store.reserveVolume(volume('acme', 'scratch'), []);
    assert.ok(second.reserved);
    assert.notEqual(second.node, work?.node, 'the next goes to the node with fewer volumes');
    await store.confirmVolume('acme', 'scratch');
    assert.deepEqual(await store.reserveVolume(volume('acme', 'big', 801), []), { reserved: false, why: 'quota', volumes: 2, mib: 200 });
    assert.ok((await store.reserveVolume(volume('acme', 'third'), [])).reserved);
    assert.deepEqual(await store.reserveVolume(volume('acme', 'fourth'), []), { reserved: false, why: 'quota', volumes: 3, mib: 300 });
    assert.ok((await store.reserveVolume(volume('other', 'work'), [])).reserved, "another tenant's name and quota are its own");
    assert.deepEqual(await store.reserveVolume(volume('other', 'x'), ['a', 'b']), { reserved: false, why: 'no_node', volumes: 1, mib: 100 });
    assert.deepEqual(
      (await store.listVolumes('acme')).map((v) => v.name),
      ['scratch', 'third', 'work'],
    );

    // Placement: only the node holding the volumes, checked again in the statement.
    const home = work?.node as string;
    const pinned: PlacementRequest = { ...CREATE, volumes: { node: home, names: ['work'] } };
    for (let i = 0; i < 4; i++) {
      const outcome = await store.place(`v-${i}`, 'acme', pinned, []);
      assert.ok(outcome.placed);
      assert.equal(outcome.node.name, home, 'placed with its volume, however full that node gets');
    }
    // Another tenant naming acme's volume (a gateway's bug): the statement finds no such volume of its own there.
    const foreign = await store.place('v-foreign', 'other', { ...CREATE, volumes: { node: home, names: ['work'] } }, []);
    assert.ok(!foreign.placed);
    assert.match(foreign.reason, /the volumes work are not \(or no longer\) all on node/);
    assert.equal(await store.lookup('v-foreign'), undefined, 'nothing written');
    await store.dropVolume('acme', 'work');
    const gone = await store.place('v-gone', 'acme', pinned, []);
    assert.ok(!gone.placed, 'a volume deleted since the gateway looked: not placed');
    assert.equal(await store.lookupVolume('acme', 'work'), undefined);
    await assertCommitmentMatchesDirectory(url);
  });

  it('view and run routes, and API keys with the single host record', async () => {
    const { url, store } = await migratedStore();
    const hash = Buffer.alloc(32, 7);
    await store.recordViewToken(hash, 'sess-1', new Date(Date.now() + 60_000));
    assert.equal(await store.lookupViewToken(hash), 'sess-1');
    const expired = Buffer.alloc(32, 8);
    await store.recordViewToken(expired, 'sess-2', new Date(Date.now() - 1000));
    assert.equal(await store.lookupViewToken(expired), undefined, 'an expired token routes nowhere');
    await store.recordViewToken(Buffer.alloc(32, 9), 'sess-3', new Date(Date.now() + 60_000));
    const db = new Db({ url });
    opened.push(db);
    const left = await db.query<{ n: number }>('test', 'SELECT count(*)::integer AS n FROM view_routes WHERE token_hash = $1', [expired]);
    assert.equal(left.rows[0]?.n, 0, 'expired routes are pruned');
    await store.recordRun('run-1', 'sess-1');
    assert.equal(await store.lookupRun('run-1'), 'sess-1');
    assert.equal(await store.lookupRun('run-2'), undefined);

    const made = generateApiKey();
    const record = { id: made.id, tenant: 'acme', hash: made.hash, createdAt: new Date().toISOString(), expiresAt: null, revokedAt: null };
    await store.createKey(record);
    const other = generateApiKey();
    await store.createKey({ id: other.id, tenant: 'other', hash: other.hash, createdAt: new Date().toISOString(), expiresAt: null, revokedAt: null });
    assert.deepEqual(await store.findKey(made.id), record);
    assert.deepEqual(
      (await store.listKeys('acme')).map((key) => key.id),
      [made.id],
    );
    assert.equal((await store.listKeys()).length, 2);
    const revokedAt = new Date('2030-01-01T00:00:00.000Z');
    assert.equal(await store.revokeKey(made.id, revokedAt), true);
    assert.equal(await store.revokeKey(made.id, new Date('2031-01-01T00:00:00.000Z')), true);
    assert.equal((await store.findKey(made.id))?.revokedAt, revokedAt.toISOString(), 'the first revocation date stays');
    assert.equal(await store.revokeKey('nosuchkey000', revokedAt), false);
  });

  it('the database stopped for 10 s, then paused: calls fail within ~2 s with cluster_state_unavailable, and the same store recovers', async () => {
    // A server of this test's own: the file's other tests keep theirs.
    const own = await startPostgres();
    const idleErrors: Error[] = [];
    const timeoutMs = 2000;
    const store = new PgClusterStore({ url: own.url, timeoutMs, onIdleError: (error) => idleErrors.push(error) });
    opened.push(store);
    await store.migrate();
    await store.registerNode('n', 'i', report());
    assert.ok((await store.place('before', 'acme', CREATE, [])).placed);

    const calls: Array<[string, () => Promise<unknown>]> = [
      ['lookup', () => store.lookup('before')],
      ['place', () => store.place(randomUUID(), 'acme', CREATE, [])],
      ['heartbeat', () => store.heartbeat('n', 'i', report())],
      ['markLostNodes', () => store.markLostNodes(10_000)],
      ['end', () => store.end('before')],
    ];
    /** Every call fails with the typed error, each within the bound; returns the slowest (ms). */
    async function allRefusedQuickly(): Promise<number> {
      let slowest = 0;
      for (const [name, call] of calls) {
        const started = performance.now();
        await assert.rejects(call(), (error: unknown) => {
          assert.ok(error instanceof ClusterStateUnavailableError, `${name}: ${String(error)}`);
          assert.equal(error.code, 'cluster_state_unavailable');
          assert.equal(httpStatusOf(error.code), 503);
          return true;
        });
        const took = performance.now() - started;
        // 2,251-2,252 ms in CI runs: the timeout and the pool's give-up; the slack is for a busy host.
        assert.ok(took < timeoutMs + 2500, `${name} took ${took.toFixed(0)} ms to fail`);
        slowest = Math.max(slowest, took);
      }
      const started = performance.now();
      assert.equal(await store.ping(), false);
      assert.ok(performance.now() - started < timeoutMs + 2500);
      return slowest;
    }
    async function recovers(): Promise<number> {
      const started = performance.now();
      for (;;) {
        try {
          assert.equal((await store.lookup('before'))?.state, 'creating');
          // (10 s without a heartbeat: the node is stale until it heartbeats again.)
          assert.equal(await store.heartbeat('n', 'i', report()), 'ok');
          assert.ok((await store.place(randomUUID(), 'acme', CREATE, [])).placed);
          return performance.now() - started;
        } catch (error) {
          assert.ok(error instanceof ClusterStateUnavailableError, String(error));
          assert.ok(performance.now() - started < 5000, 'not recovered 5 s after the database came back');
          await sleep(100);
        }
      }
    }

    // Stopped (every process killed: connections reset, new ones refused) for 10 s.
    await own.kill();
    const stoppedAt = performance.now();
    const slowestStopped: number[] = [];
    while (performance.now() - stoppedAt < 10_000) {
      slowestStopped.push(await allRefusedQuickly());
      await sleep(250);
    }
    await own.start();
    const afterRestart = await recovers();

    // Paused: connections open, nothing answers (the worst case: only the client's timers end a wait).
    own.pause();
    const slowestPaused = await allRefusedQuickly();
    own.resume();
    const afterResume = await recovers();
    console.log(
      `database stopped: slowest failure ${Math.max(...slowestStopped).toFixed(0)} ms over ${slowestStopped.length} rounds, ` +
        `recovered ${afterRestart.toFixed(0)} ms after the restart; paused: slowest failure ${slowestPaused.toFixed(0)} ms, ` +
        `recovered ${afterResume.toFixed(0)} ms after resuming; idle connection errors seen: ${idleErrors.length}`,
    );
    assert.ok(slowestPaused >= 1500, 'a paused database is waited for about the bound, not refused at once');
    uncaught.assertNone();
  });
});
