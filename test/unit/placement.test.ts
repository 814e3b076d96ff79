/**
 * Placement across the nodes of a cluster (issue 22): which node can take a create, which one
 * is chosen, the retries, the 503 that says why, and the 10,000-session simulation.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { InvalidRequestError, OrchestratorError } from '../../src/errors.js';
import { NoNodeError, placeWithRetries } from '../../src/cluster/place-retry.js';
import { describeSimulation, simulatePlacement } from '../../src/bench/placement-simulation.js';
import {
  DEFAULT_SAMPLE_SIZE,
  DEFAULT_WARM_BONUS,
  place,
  seededRandom,
  unfitFor,
  type NodeSnapshot,
  type PlacementRequest,
} from '../../src/cluster/placement.js';
import { httpStatusOf } from '../../src/api/errors.js';

const REQUEST: PlacementRequest = { runtime: 'qemu', template: 'desktop', memoryMiB: 2048, vcpus: 2 };

interface NodeShape {
  name: string;
  runtimes?: NodeSnapshot['runtimes'];
  templates?: string[];
  warm?: Record<string, number>;
  maxSessions?: number;
  sessions?: number;
  memory?: [committed: number, total: number];
  cpu?: [committed: number, total: number];
  draining?: boolean;
  healthy?: boolean;
}

function node(shape: NodeShape): NodeSnapshot {
  const [memoryCommitted, memoryTotal] = shape.memory ?? [0, 16384];
  const [cpuCommitted, cpuTotal] = shape.cpu ?? [0, 16];
  return {
    name: shape.name,
    runtimes: shape.runtimes ?? ['container', 'qemu'],
    templates: shape.templates ?? ['desktop', 'browser'],
    warm: shape.warm ?? {},
    capacity: {
      maxSessions: shape.maxSessions ?? 100,
      sessions: shape.sessions ?? 0,
      memoryMiB: { committed: memoryCommitted, total: memoryTotal },
      vcpus: { committed: cpuCommitted, total: cpuTotal },
    },
    draining: shape.draining ?? false,
    healthy: shape.healthy ?? true,
  };
}

describe('placement: which nodes can take a create', () => {
  it('rules a node out for the first constraint it fails', () => {
    const cases: [NodeShape, string | undefined][] = [
      [{ name: 'fits' }, undefined],
      [{ name: 'sick', healthy: false, draining: true }, 'unhealthy'],
      [{ name: 'drain', draining: true }, 'draining'],
      [{ name: 'containers-only', runtimes: ['container'] }, 'runtime'],
      [{ name: 'no-image', templates: ['browser'] }, 'template'],
      [{ name: 'full', maxSessions: 4, sessions: 4 }, 'sessions'],
      [{ name: 'no-memory', memory: [15000, 16384] }, 'memory'],
      [{ name: 'no-cpu', cpu: [15, 16] }, 'cpu'],
      // Exactly full after placing still fits: totals are what the node offers.
      [{ name: 'exact', maxSessions: 5, sessions: 4, memory: [14336, 16384], cpu: [14, 16] }, undefined],
    ];
    for (const [shape, expected] of cases) assert.equal(unfitFor(node(shape), REQUEST), expected, shape.name);
    assert.equal(unfitFor(node({ name: 'fits' }), REQUEST, new Set(['fits'])), 'excluded');
  });

  it('never chooses a node that cannot take it', () => {
    const nodes = [
      node({ name: 'sick', healthy: false }),
      node({ name: 'drain', draining: true }),
      node({ name: 'ok', cpu: [12, 16] }),
      node({ name: 'no-cpu', cpu: [15, 16] }),
    ];
    for (let seed = 0; seed < 50; seed += 1) {
      const placement = place(REQUEST, nodes, { random: seededRandom(seed) });
      assert.ok(placement.ok);
      assert.equal(placement.node.name, 'ok');
    }
  });

  it('says which constraint failed on how many nodes when nobody can take it', () => {
    const nodes = [
      node({ name: 'a', healthy: false }),
      node({ name: 'b', healthy: false }),
      node({ name: 'c', draining: true }),
      node({ name: 'd', runtimes: ['container'] }),
      node({ name: 'e', memory: [16000, 16384] }),
      node({ name: 'f', memory: [16000, 16384] }),
      node({ name: 'g', memory: [16000, 16384] }),
    ];
    const placement = place(REQUEST, nodes);
    assert.equal(placement.ok, false);
    assert.ok(!placement.ok);
    assert.equal(
      placement.reason,
      "no node can take this create (qemu, template 'desktop', 2048 MiB, 2 vCPUs): of 7 nodes, 2 not heartbeating, 1 draining, 1 without the runtime 'qemu', 3 without 2048 MiB of memory left",
    );
    assert.deepEqual(placement.rejected, { volumes: 0, excluded: 0, unhealthy: 2, draining: 1, runtime: 1, template: 0, sessions: 0, memory: 3, cpu: 0 });
    const empty = place(REQUEST, []);
    assert.ok(!empty.ok);
    assert.match(empty.reason, /the cluster has no nodes$/);
  });

  it('a create with volumes goes to the node holding them, however full, or nowhere, saying why', () => {
    const pinned = { ...REQUEST, volumes: { node: 'busy', names: ['work'] } };
    const nodes = [node({ name: 'empty' }), node({ name: 'busy', cpu: [12, 16] }), node({ name: 'idle' })];
    for (let seed = 1; seed <= 20; seed++) {
      const placement = place(pinned, nodes, { random: seededRandom(seed) });
      assert.ok(placement.ok);
      assert.equal(placement.node.name, 'busy', 'never the emptier nodes without its volumes');
    }
    const full = place(pinned, [node({ name: 'empty' }), node({ name: 'busy', cpu: [16, 16] })]);
    assert.ok(!full.ok);
    assert.equal(
      full.reason,
      "no node can take this create (qemu, template 'desktop', 2048 MiB, 2 vCPUs): of 2 nodes, 1 not holding its volumes (on 'busy'), 1 without 2 vCPUs left",
    );
  });
});

describe('placement: which node is chosen', () => {
  it('takes the least committed of the sample, by the resource the node is shortest of', () => {
    const nodes = [
      node({ name: 'cpu-busy', cpu: [12, 16] }), // 14/16 CPU after placing
      node({ name: 'memory-busy', memory: [12288, 16384] }), // 14/16 memory after placing
      node({ name: 'half', cpu: [6, 16], memory: [6144, 16384] }), // 8/16 both
    ];
    const placement = place(REQUEST, nodes, { sampleSize: 3, random: seededRandom(1) });
    assert.ok(placement.ok);
    assert.equal(placement.node.name, 'half');
    assert.equal(placement.score, 0.5);
  });

  it('prefers a node with a warm sandbox of the template, within the bonus', () => {
    const cold = node({ name: 'cold', cpu: [4, 16] }); // 6/16 = 0.375 after placing
    const warmClose = node({ name: 'warm', cpu: [5, 16], warm: { desktop: 1 } }); // 0.4375 - bonus
    const warmOther = node({ name: 'warm-other', cpu: [5, 16], warm: { browser: 3 } });
    const warmFull = node({ name: 'warm-full', cpu: [12, 16], warm: { desktop: 2 } }); // 0.875 - bonus
    const chosen = place(REQUEST, [cold, warmClose, warmFull], { sampleSize: 3, random: seededRandom(2) });
    assert.ok(chosen.ok);
    assert.equal(chosen.node.name, 'warm');
    assert.equal(chosen.warm, true);
    assert.ok(Math.abs(chosen.score - (7 / 16 - DEFAULT_WARM_BONUS)) < 1e-9);
    // A warm sandbox of another template is no reason; a warm but much fuller node loses.
    const other = place(REQUEST, [cold, warmOther], { sampleSize: 2, random: seededRandom(2) });
    assert.ok(other.ok);
    assert.equal(other.node.name, 'cold');
    const full = place(REQUEST, [cold, warmFull], { sampleSize: 2, random: seededRandom(2) });
    assert.ok(full.ok);
    assert.equal(full.node.name, 'cold');
    assert.equal(full.warm, false);
  });

  it('scores only a sample of K: the random source decides which, and a seed replays it', () => {
    const nodes = Array.from({ length: 50 }, (_, i) => node({ name: `n${i}`, cpu: [i % 10, 16] }));
    const run = (seed: number): string[] => {
      const random = seededRandom(seed);
      return Array.from({ length: 200 }, () => {
        const placement = place(REQUEST, nodes, { random });
        assert.ok(placement.ok);
        return placement.node.name;
      });
    };
    assert.deepEqual(run(7), run(7));
    assert.notDeepEqual(run(7), run(8));
    // K = 1 with a source that always says 0: the first feasible node, however busy.
    const first = place(REQUEST, nodes.slice(9), { sampleSize: 1, random: () => 0 });
    assert.ok(first.ok);
    assert.equal(first.node.name, 'n9');
    // K nodes are seen, not all: over many choices the emptiest node is not always taken.
    const names = new Set(run(3));
    assert.ok(names.size > 10, `choices spread over ${names.size} nodes`);
  });
});

describe('placement: retries on a node that fails the create', () => {
  const nodes = Array.from({ length: 6 }, (_, i) => node({ name: `n${i}` }));

  it('leaves out every node that failed, and stops at the first that answers', async () => {
    const asked: string[] = [];
    const placed = await placeWithRetries(
      REQUEST,
      () => nodes,
      async (target) => {
        asked.push(target.name);
        if (asked.length < 3) throw new Error(`${target.name} is exhausted`);
        return `session on ${target.name}`;
      },
      { random: seededRandom(11) },
    );
    assert.equal(asked.length, 3);
    assert.equal(new Set(asked).size, 3, `no node asked twice: ${asked.join(', ')}`);
    assert.equal(placed.node.name, asked[2]);
    assert.equal(placed.result, `session on ${asked[2]}`);
    assert.deepEqual(
      placed.failures.map((failure) => failure.node),
      asked.slice(0, 2),
    );
  });

  it('gives up after 3 tries with a 503 naming what each node answered', async () => {
    const asked: string[] = [];
    const failing = placeWithRetries(
      REQUEST,
      () => nodes,
      async (target) => {
        asked.push(target.name);
        throw new Error('out of memory');
      },
      { random: seededRandom(5) },
    );
    await assert.rejects(failing, (error: unknown) => {
      assert.ok(error instanceof NoNodeError);
      assert.equal(httpStatusOf(error.code), 503);
      assert.equal(error.failures.length, 3);
      assert.equal(error.message, `no node could take this create in 3 tries; tried: ${asked.map((name) => `'${name}': out of memory`).join('; ')}`);
      return true;
    });
    assert.equal(new Set(asked).size, 3);
  });

  it('says why when the nodes left after the failures cannot take it', async () => {
    const two = [node({ name: 'a' }), node({ name: 'b' }), node({ name: 'c', draining: true })];
    const failing = placeWithRetries(
      REQUEST,
      () => two,
      async () => Promise.reject(new Error('connection refused')),
      { random: seededRandom(1) },
    );
    await assert.rejects(failing, (error: unknown) => {
      assert.ok(error instanceof NoNodeError);
      assert.match(error.message, /: of 3 nodes, 2 already failed this create, 1 draining; tried: '[ab]': connection refused; '[ab]': connection refused$/);
      assert.equal(error.rejected.excluded, 2);
      return true;
    });
  });

  it('does not retry a request the node refused as wrong (4xx): another node would say the same', async () => {
    let tries = 0;
    const refused = placeWithRetries(
      REQUEST,
      () => nodes,
      async () => {
        tries += 1;
        throw new InvalidRequestError('template: unknown');
      },
    );
    await assert.rejects(refused, InvalidRequestError);
    assert.equal(tries, 1);
    // A 5xx from a node is the node's trouble: retried.
    let unavailable = 0;
    await placeWithRetries(
      REQUEST,
      () => nodes,
      async () => {
        unavailable += 1;
        if (unavailable === 1) throw new OrchestratorError('unavailable', 'busy');
        return 'ok';
      },
    );
    assert.equal(unavailable, 2);
  });
});

describe('placement: simulation of a cluster filling up', () => {
  it('10,000 sessions onto 1,000 nodes of mixed size: the fullest node stays within 1.15 of the ideal', () => {
    // Seed 24 is the worst of the seeds 22-27 (sampled as a gateway does: 1.103-1.135; scanning
    // every node: 1.106-1.133); one run is ~0.1 s of CPU sampled, ~0.5 s scanning. The
    // simulation is the bench's too (src/bench/placement-simulation.ts, its goal table).
    const seed = 24;
    const figures = simulatePlacement(seed);
    console.log(describeSimulation(figures));
    assert.equal(figures.sampleSize, DEFAULT_SAMPLE_SIZE);
    assert.ok(figures.dominant <= 1.15, `seed ${seed}: fullest/ideal ${figures.dominant.toFixed(3)}`);
    // The control: the same creates, every choice scanning every node.
    const scanned = simulatePlacement(seed, 1000, 10_000, undefined, true);
    console.log(`scanning every node: ${describeSimulation(scanned)}`);
    assert.ok(scanned.dominant <= 1.15, `seed ${seed}, scanning: fullest/ideal ${scanned.dominant.toFixed(3)}`);
  });
});
