/**
 * Placement's sampled choice (issue 22; src/cluster/placement.ts NodeSampler): the sample is
 * drawn from every node without walking them all, keeping only nodes that can take the
 * create, and place() scans every node when the draws do not find K. What a caller sees must
 * be what the full scan gives: never a node that cannot take the create, the same refusal
 * and reason, the holder of the volumes, the warm node, the excluded nodes left out.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { DEFAULT_SAMPLE_SIZE, NodeSampler, place, seededRandom, unfitFor, type NodeSnapshot, type PlacementRequest } from '../../src/cluster/placement.js';

const REQUEST: PlacementRequest = { runtime: 'qemu', template: 'desktop', memoryMiB: 2048, vcpus: 2 };

type Mutable = NodeSnapshot & {
  draining: boolean;
  warm: Record<string, number>;
  healthy: boolean;
  capacity: { maxSessions: number; sessions: number; memoryMiB: { total: number; committed: number }; vcpus: { total: number; committed: number } };
};

function node(
  name: string,
  shape: Partial<Pick<NodeSnapshot, 'runtimes' | 'templates' | 'warm' | 'draining' | 'healthy'>> & { cpu?: [number, number] } = {},
): Mutable {
  const [committed, total] = shape.cpu ?? [0, 16];
  return {
    name,
    runtimes: shape.runtimes ?? ['container', 'qemu'],
    templates: shape.templates ?? ['desktop'],
    warm: { ...(shape.warm ?? {}) },
    capacity: { maxSessions: 100, sessions: 0, memoryMiB: { total: 65_536, committed: 0 }, vcpus: { total, committed } },
    draining: shape.draining ?? false,
    healthy: shape.healthy ?? true,
  };
}

/** 1,000 nodes, most of which cannot take REQUEST for one reason or another. */
function mixedCluster(): Mutable[] {
  return Array.from({ length: 1000 }, (_, i) => {
    if (i % 5 === 0) return node(`n${i}`, { healthy: false });
    if (i % 5 === 1) return node(`n${i}`, { runtimes: ['container'] });
    if (i % 5 === 2) return node(`n${i}`, { cpu: [15, 16] });
    return node(`n${i}`, { cpu: [i % 12, 16 * (1 + (i % 4))] });
  });
}

describe('placement: the sampled choice', () => {
  it('never takes a node that cannot take the create, and spreads like the full scan', () => {
    const nodes = mixedCluster();
    const sampler = new NodeSampler(nodes);
    const random = seededRandom(5);
    const chosen = new Set<string>();
    for (let i = 0; i < 2000; i++) {
      const placement = place(REQUEST, sampler, { random });
      assert.ok(placement.ok);
      assert.equal(unfitFor(placement.node, REQUEST), undefined, `${placement.node.name} cannot take it`);
      chosen.add(placement.node.name);
      // Committed in place, as the view does: the next choice sees it.
      const capacity = (placement.node as Mutable).capacity;
      capacity.sessions += 1;
      capacity.vcpus.committed += REQUEST.vcpus;
    }
    assert.ok(chosen.size > 100, `choices spread over ${chosen.size} nodes`);
  });

  it("finds the one node of 1,000 that can take it, and refuses with the full scan's reason when none can", () => {
    const nodes = Array.from({ length: 1000 }, (_, i) => node(`n${i}`, { templates: i === 637 ? ['desktop'] : ['browser'] }));
    const sampler = new NodeSampler(nodes);
    const found = place(REQUEST, sampler, { random: seededRandom(1) });
    assert.ok(found.ok);
    assert.equal(found.node.name, 'n637');
    nodes[637]!.capacity.vcpus.committed = 15; // full now, in place
    const refused = place(REQUEST, sampler, { random: seededRandom(1) });
    const scanned = place(REQUEST, nodes, { random: seededRandom(1) });
    assert.equal(refused.ok, false);
    assert.deepEqual(refused, scanned);
    assert.match(!refused.ok ? refused.reason : '', /of 1000 nodes, 999 without the template 'desktop' built, 1 without 2 vCPUs left/);
  });

  it('leaves out the excluded nodes, and places a create with volumes on their holder only', () => {
    const nodes = Array.from({ length: 200 }, (_, i) => node(`n${i}`));
    const sampler = new NodeSampler(nodes);
    const exclude = new Set(nodes.slice(0, 190).map((n) => n.name));
    for (let seed = 1; seed <= 20; seed++) {
      const placement = place(REQUEST, sampler, { random: seededRandom(seed), exclude });
      assert.ok(placement.ok);
      assert.ok(!exclude.has(placement.node.name), placement.node.name);
    }
    const withVolumes = { ...REQUEST, volumes: { node: 'n42', names: ['data'] } };
    const there = place(withVolumes, sampler, { random: seededRandom(2) });
    assert.ok(there.ok);
    assert.equal(there.node.name, 'n42');
    nodes[42]!.draining = true;
    const nowhere = place(withVolumes, sampler, { random: seededRandom(2) });
    assert.equal(nowhere.ok, false);
    assert.match(!nowhere.ok ? nowhere.reason : '', /199 not holding its volumes \(on 'n42'\), 1 draining/);
  });

  it('offers a warm node outside the K drawn; one that gains warm sandboxes after the sampler is built, once told (warmChanged)', () => {
    const nodes = [...Array.from({ length: 200 }, (_, i) => node(`cold-${i}`, { cpu: [4, 16] })), node('warm', { cpu: [4, 16], warm: { desktop: 1 } })];
    const sampler = new NodeSampler(nodes);
    for (let seed = 1; seed <= 20; seed++) {
      const chosen = place(REQUEST, sampler, { random: seededRandom(seed) });
      assert.ok(chosen.ok);
      assert.equal(chosen.node.name, 'warm', `seed ${seed}`);
    }
    nodes[200]!.warm.desktop = 0; // taken: no longer preferred, without telling the sampler
    nodes[7]!.warm.desktop = 2; // a node that had none gains some
    const before = place(REQUEST, sampler, { random: seededRandom(4) });
    assert.ok(before.ok);
    assert.notEqual(before.node.name, 'warm');
    sampler.warmChanged();
    for (let seed = 1; seed <= 20; seed++) {
      const chosen = place(REQUEST, sampler, { random: seededRandom(seed) });
      assert.ok(chosen.ok);
      assert.equal(chosen.node.name, 'cold-7', `seed ${seed}`);
    }
  });

  it('draws nodes in proportion to their size, as told by sizesChanged()', () => {
    // K = 1: the choice is the draw. 100 nodes of 8 vCPUs and 100 of 56: 1 in 8 draws from the small ones.
    const nodes = Array.from({ length: 200 }, (_, i) => node(`n${i}`, { cpu: [0, i < 100 ? 8 : 56] }));
    const sampler = new NodeSampler(nodes);
    const smallShare = (): number => {
      const random = seededRandom(9);
      let small = 0;
      for (let i = 0; i < 4000; i++) {
        const placement = place(REQUEST, sampler, { random, sampleSize: 1 });
        assert.ok(placement.ok);
        if (Number(placement.node.name.slice(1)) < 100) small++;
      }
      return small / 4000;
    };
    assert.ok(Math.abs(smallShare() - 1 / 8) < 0.03, `small nodes drawn ${smallShare()}`);
    for (const n of nodes.slice(100)) n.capacity.vcpus.total = 8; // all the same size now
    sampler.sizesChanged();
    assert.ok(Math.abs(smallShare() - 1 / 2) < 0.04, `small nodes drawn ${smallShare()}`);
    assert.ok(DEFAULT_SAMPLE_SIZE > 1);
  });
});
