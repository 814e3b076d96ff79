/**
 * Issue 22's placement simulation, shared by the unit test (test/unit/placement.test.ts) and
 * the bench's goal table: 10,000 sessions of mixed size placed one after another onto 1,000
 * simulated nodes of mixed size with the real scoring code (`place()`), each choice committed
 * to the chosen node's row as the directory would. The figure is how full the fullest node
 * is against the ideal: the cluster's commitment of its scarcer resource, a bound no
 * placement can beat.
 */
import { DEFAULT_SAMPLE_SIZE, NodeSampler, place, seededRandom, type NodeSnapshot } from '../cluster/placement.js';

/** A node whose commitment the simulation updates in place (the directory's row). */
interface SimNode extends NodeSnapshot {
  capacity: { maxSessions: number; sessions: number; memoryMiB: { total: number; committed: number }; vcpus: { total: number; committed: number } };
}

const GiB = 1024;
/** Mixed sizes and shapes (4 GiB a vCPU, and memory-lean 2 GiB a vCPU): [vCPUs, memory MiB]. */
const NODE_SIZES: [number, number][] = [
  [8, 32 * GiB],
  [16, 64 * GiB],
  [16, 32 * GiB],
  [32, 128 * GiB],
  [32, 64 * GiB],
  [48, 192 * GiB],
  [64, 256 * GiB],
];
/** Desktops of mixed size, some memory-heavy. */
const SESSION_SIZES: [number, number][] = [
  [1, 2 * GiB],
  [2, 4 * GiB],
  [2, 4 * GiB],
  [4, 8 * GiB],
  [2, 8 * GiB],
];

export interface SimulationFigures {
  readonly seed: number;
  readonly nodes: number;
  readonly sessions: number;
  readonly sampleSize: number;
  /** The fullest node's larger commitment (CPU or memory) / the cluster's commitment of its scarcer resource. */
  readonly dominant: number;
  readonly cpu: { fullest: number; ideal: number };
  readonly memory: { fullest: number; ideal: number };
  /** CPU time the run took, ms. */
  readonly cpuMs: number;
  /** With warm pools (WarmPools): the creates that landed on a node with a warm sandbox of the template, of all. */
  readonly warmShare?: number;
}

/**
 * Warm pools in the simulation: every `every`-th node keeps `size` warm sandboxes of the
 * template; a create placed there takes one, and the cluster boots one back into each pool
 * short of its size every `refillEvery` creates (a boot takes a while: creates come faster).
 */
export interface WarmPools {
  readonly every: number;
  readonly size: number;
  readonly refillEvery: number;
  /** Placement's warm bonus (0: warm sandboxes are no reason, the control). */
  readonly bonus?: number;
}

/** Seeds the bench runs (the unit test runs 24, the worst of them). */
export const SIMULATION_SEEDS: readonly number[] = [22, 23, 24, 25, 26, 27];

/**
 * `scan`: every choice scans every node (place() given the array), the control for the
 * sampled choice a gateway makes (given a NodeSampler, as the placement transaction does).
 */
export function simulatePlacement(seed: number, nodeCount = 1000, sessionCount = 10_000, pools?: WarmPools, scan = false): SimulationFigures {
  const cpuStart = process.cpuUsage();
  const random = seededRandom(seed);
  const pick = <T>(list: readonly T[]): T => list[Math.floor(random() * list.length)] as T;
  const nodes: SimNode[] = Array.from({ length: nodeCount }, (_, i) => {
    const [vcpus, memoryMiB] = pick(NODE_SIZES);
    return {
      name: `node-${i}`,
      runtimes: ['container', 'qemu', 'firecracker'],
      templates: ['desktop'],
      warm: pools && i % pools.every === 0 ? { desktop: pools.size } : ({} as Record<string, number>),
      capacity: { maxSessions: 1000, sessions: 0, memoryMiB: { total: memoryMiB, committed: 0 }, vcpus: { total: vcpus, committed: 0 } },
      draining: false,
      healthy: true,
    };
  });
  const pooled = pools ? nodes.filter((n) => n.warm.desktop !== undefined) : [];
  const sampler = new NodeSampler(nodes);
  let warmCreates = 0;
  for (let i = 0; i < sessionCount; i += 1) {
    const [vcpus, memoryMiB] = pick(SESSION_SIZES);
    const placement = place({ runtime: 'qemu', template: 'desktop', vcpus, memoryMiB }, scan ? nodes : sampler, {
      random,
      ...(pools?.bonus !== undefined ? { warmBonus: pools.bonus } : {}),
    });
    if (!placement.ok) throw new Error(`simulation, seed ${seed}, session ${i}: ${placement.reason}`);
    const chosen = placement.node as SimNode;
    const warm = chosen.warm.desktop ?? 0;
    if (warm > 0) {
      warmCreates += 1;
      (chosen as { warm: Record<string, number> }).warm = { desktop: warm - 1 };
    }
    if (pools && i % pools.refillEvery === 0) {
      for (const n of pooled) if ((n.warm.desktop ?? 0) < pools.size) (n as { warm: Record<string, number> }).warm = { desktop: (n.warm.desktop ?? 0) + 1 };
      sampler.warmChanged(); // some had none left
    }
    const { capacity } = chosen;
    capacity.sessions += 1;
    capacity.vcpus.committed += vcpus;
    capacity.memoryMiB.committed += memoryMiB;
  }
  const sum = (of: (n: SimNode) => number): number => nodes.reduce((total, n) => total + of(n), 0);
  const cpuOf = (n: SimNode): number => n.capacity.vcpus.committed / n.capacity.vcpus.total;
  const memoryOf = (n: SimNode): number => n.capacity.memoryMiB.committed / n.capacity.memoryMiB.total;
  const cpuIdeal = sum((n) => n.capacity.vcpus.committed) / sum((n) => n.capacity.vcpus.total);
  const memoryIdeal = sum((n) => n.capacity.memoryMiB.committed) / sum((n) => n.capacity.memoryMiB.total);
  const fullest = Math.max(...nodes.map((n) => Math.max(cpuOf(n), memoryOf(n))));
  const used = process.cpuUsage(cpuStart);
  return {
    seed,
    nodes: nodeCount,
    sessions: sessionCount,
    sampleSize: DEFAULT_SAMPLE_SIZE,
    // No placement can keep every node under the cluster's commitment of its scarcer resource.
    dominant: fullest / Math.max(cpuIdeal, memoryIdeal),
    cpu: { fullest: Math.max(...nodes.map(cpuOf)), ideal: cpuIdeal },
    memory: { fullest: Math.max(...nodes.map(memoryOf)), ideal: memoryIdeal },
    cpuMs: (used.user + used.system) / 1000,
    ...(pools ? { warmShare: warmCreates / sessionCount } : {}),
  };
}

export function describeSimulation(f: SimulationFigures): string {
  return (
    `placement simulation, seed ${f.seed} (${f.sessions.toLocaleString('en')} sessions, ${f.nodes.toLocaleString('en')} nodes, K=${f.sampleSize}): ` +
    `fullest node ${f.dominant.toFixed(3)} x the ideal (CPU: fullest ${f.cpu.fullest.toFixed(3)}, ideal ${f.cpu.ideal.toFixed(3)}; ` +
    `memory: fullest ${f.memory.fullest.toFixed(3)}, ideal ${f.memory.ideal.toFixed(3)}); ${f.cpuMs.toFixed(0)} ms of CPU`
  );
}
