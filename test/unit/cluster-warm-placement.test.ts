/**
 * Placement's preference for a node with a warm sandbox of the template (issue 22), in the
 * 10,000-session simulation (src/bench/placement-simulation.ts) with warm pools on 2% of
 * the nodes, refilled as creates come: against the same run with no warm bonus (the
 * control), more creates land where a warm sandbox waits, and the fullest node pays for it
 * at most the bonus.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { describeSimulation, simulatePlacement, type WarmPools } from '../../src/bench/placement-simulation.js';
import { DEFAULT_WARM_BONUS, place, seededRandom, WARM_SAMPLE_SIZE, type NodeSnapshot } from '../../src/cluster/placement.js';

function node(name: string, committedVcpus: number, warm: Record<string, number> = {}): NodeSnapshot {
  return {
    name,
    runtimes: ['container'],
    templates: ['desktop'],
    warm,
    capacity: { maxSessions: 100, sessions: committedVcpus, memoryMiB: { total: 65_536, committed: 0 }, vcpus: { total: 16, committed: committedVcpus } },
    draining: false,
    healthy: true,
  };
}

describe('placement: warm sandboxes', () => {
  it('a warm node outside the K drawn is offered the create, and takes it within the bonus', () => {
    // 200 cold nodes at 0.25, one warm node at 0.25: drawn by size alone it would be in a
    // sample of 16 one time in 13; it is always offered, and wins on the bonus.
    const nodes = [...Array.from({ length: 200 }, (_, i) => node(`cold-${i}`, 4)), node('warm', 4, { desktop: 1 })];
    const request = { runtime: 'container' as const, template: 'desktop', memoryMiB: 1024, vcpus: 1 };
    for (let seed = 1; seed <= 20; seed++) {
      const chosen = place(request, nodes, { random: seededRandom(seed) });
      assert.ok(chosen.ok);
      assert.equal(chosen.node.name, 'warm', `seed ${seed}`);
      assert.equal(chosen.warm, true);
    }
    // Fuller by more than the bonus: a preference, not a veto.
    const fuller = [...nodes.slice(0, 200), node('warm', 4 + Math.ceil(16 * DEFAULT_WARM_BONUS) + 1, { desktop: 1 })];
    const other = place(request, fuller, { random: seededRandom(3) });
    assert.ok(other.ok);
    assert.notEqual(other.node.name, 'warm');
    assert.ok(WARM_SAMPLE_SIZE >= 1);
  });

  it('10,000 sessions, warm pools on 2% of 1,000 nodes: more creates land warm than without the bonus, the fullest node within 1.15 + the bonus', () => {
    const pools: WarmPools = { every: 50, size: 2, refillEvery: 100 };
    const preferred = simulatePlacement(24, 1000, 10_000, pools);
    const control = simulatePlacement(24, 1000, 10_000, { ...pools, bonus: 0 });
    console.log(`${describeSimulation(preferred)}; warm creates ${(100 * (preferred.warmShare ?? 0)).toFixed(2)}%`);
    console.log(`control (no warm bonus): ${describeSimulation(control)}; warm creates ${(100 * (control.warmShare ?? 0)).toFixed(2)}%`);
    assert.ok((preferred.warmShare ?? 0) > 1.15 * (control.warmShare ?? 0), `warm creates ${preferred.warmShare} vs ${control.warmShare} without the bonus`);
    assert.ok(preferred.dominant <= 1.15 + DEFAULT_WARM_BONUS, `fullest/ideal ${preferred.dominant.toFixed(3)}`);
    assert.ok(control.dominant <= 1.15, `control: fullest/ideal ${control.dominant.toFixed(3)}`);
  });
});
