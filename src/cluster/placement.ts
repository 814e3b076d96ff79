/**
 * Placement of a create across the nodes of a cluster (issue 22; docs/cluster.md).
 *
 * Pure code, no I/O: the caller reads the node snapshots (later, from PostgreSQL, inside the
 * transaction that commits the choice) and hands them in. The method follows E2B's: filter the
 * nodes that can run the create, score a random sample of K of them by their CPU and memory
 * commitment after placing it, take the best ("power of K choices": nearly as even as
 * scoring every node, at the cost of K, and two gateways deciding at once rarely pick the
 * same node). Unlike a uniform sample, nodes are drawn in proportion to their size: a uniform
 * sample offers a 16-vCPU node as many creates as a 96-vCPU one, which overfills the small
 * ones (at K = 3 on nodes of 16-96 vCPUs, fullest/ideal 1.31-1.37 uniform, 1.18-1.20 by size;
 * at the default K the two differ little, see test/unit/placement.test.ts). A node with a
 * warm sandbox of the template gets a bonus, not a veto, so a warm but full node does not
 * attract every create.
 */
import type { RuntimeName } from '../runtimes/runtime.js';

/** What a create asks of a node. */
export interface PlacementRequest {
  readonly runtime: RuntimeName;
  readonly template: string;
  readonly memoryMiB: number;
  readonly vcpus: number;
  /**
   * The node that holds the create's volumes (the directory's, for the tenant): no other may
   * take it, and the placement statement checks they are still there (placement-tx.ts).
   */
  readonly volumes?: { readonly node: string; readonly names: readonly string[] };
}

/** A committed resource on a node: `total` is what the node offers (its overcommit included). */
export interface Commitment {
  readonly total: number;
  readonly committed: number;
}

/** A node as the directory last saw it (its heartbeat). */
export interface NodeSnapshot {
  readonly name: string;
  readonly runtimes: readonly RuntimeName[];
  /** Templates whose image is built on this node. */
  readonly templates: readonly string[];
  /** Warm sandboxes ready to hand out, per template. */
  readonly warm: Readonly<Record<string, number>>;
  readonly capacity: {
    readonly maxSessions: number;
    readonly sessions: number;
    readonly memoryMiB: Commitment;
    readonly vcpus: Commitment;
  };
  /** Drained by an operator: no new sessions, existing ones run to their end. */
  readonly draining: boolean;
  /** Heartbeating; a node that stopped is not healthy (its sessions are lost). */
  readonly healthy: boolean;
}

/** Why a node cannot take a create; checked in this order, the first that fails counts. */
export const CONSTRAINTS = ['volumes', 'excluded', 'unhealthy', 'draining', 'runtime', 'template', 'sessions', 'memory', 'cpu'] as const;
export type Constraint = (typeof CONSTRAINTS)[number];

/** A uniform number in [0, 1), like Math.random; injected so a choice can be replayed. */
export type Random = () => number;

export interface PlacementOptions {
  /** How many feasible nodes are scored (K). */
  readonly sampleSize?: number;
  /** Subtracted from a node's score when it holds a warm sandbox of the template. */
  readonly warmBonus?: number;
  readonly random?: Random;
  /** Nodes not to consider (those that already failed this create). */
  readonly exclude?: ReadonlySet<string>;
}

/**
 * K. E2B's is 3; with nodes of mixed size and 10 sessions a node, K = 3 leaves the fullest
 * node 1.2-1.34 times the ideal in the simulation, K = 10 up to 1.15, K = 16 up to 1.14
 * (scoring every node: 1.08-1.11). Scoring 16 rows is nothing next to reading them.
 */
export const DEFAULT_SAMPLE_SIZE = 16;
export const DEFAULT_WARM_BONUS = 0.1;

export type Placement =
  | { readonly ok: true; readonly node: NodeSnapshot; readonly score: number; readonly warm: boolean }
  | { readonly ok: false; readonly rejected: Readonly<Record<Constraint, number>>; readonly reason: string };

/** The first constraint `node` fails for `request`, or undefined when it can take it. */
export function unfitFor(node: NodeSnapshot, request: PlacementRequest, exclude?: ReadonlySet<string>): Constraint | undefined {
  const { capacity } = node;
  if (request.volumes !== undefined && request.volumes.node !== node.name) return 'volumes';
  if (exclude?.has(node.name)) return 'excluded';
  if (!node.healthy) return 'unhealthy';
  if (node.draining) return 'draining';
  if (!node.runtimes.includes(request.runtime)) return 'runtime';
  if (!node.templates.includes(request.template)) return 'template';
  if (capacity.sessions + 1 > capacity.maxSessions) return 'sessions';
  if (capacity.memoryMiB.committed + request.memoryMiB > capacity.memoryMiB.total) return 'memory';
  if (capacity.vcpus.committed + request.vcpus > capacity.vcpus.total) return 'cpu';
  return undefined;
}

/**
 * Lower is better: the larger of the CPU and memory commitment once the create is placed,
 * so the resource a node is shortest of decides, and a small node is not filled by a big
 * create while a big node sits half empty. A warm sandbox of the template lowers it.
 */
export function scoreOf(node: NodeSnapshot, request: PlacementRequest, warmBonus = DEFAULT_WARM_BONUS): number {
  const { memoryMiB, vcpus } = node.capacity;
  const cpu = (vcpus.committed + request.vcpus) / vcpus.total;
  const memory = (memoryMiB.committed + request.memoryMiB) / memoryMiB.total;
  return Math.max(cpu, memory) - (hasWarm(node, request) ? warmBonus : 0);
}

/** How many creates like this one the node holds when empty: its weight in the sample. */
export function sizeFor(node: NodeSnapshot, request: PlacementRequest): number {
  const { memoryMiB, vcpus } = node.capacity;
  const size = Math.min(vcpus.total / request.vcpus, memoryMiB.total / request.memoryMiB);
  return Number.isFinite(size) && size > 0 ? size : 1;
}

/** Feasible nodes with a warm sandbox of the template added to each sample (besides the K drawn). */
export const WARM_SAMPLE_SIZE = 2;

function hasWarm(node: NodeSnapshot, request: PlacementRequest): boolean {
  return (node.warm[request.template] ?? 0) > 0;
}

/**
 * Choose a node for `request` among `nodes`, or say which constraints ruled them all out. Given
 * a NodeSampler, the sample is drawn without looking at every node when it can be (below).
 */
export function place(request: PlacementRequest, nodes: readonly NodeSnapshot[] | NodeSampler, options: PlacementOptions = {}): Placement {
  const random = options.random ?? Math.random;
  const sampleSize = Math.max(1, options.sampleSize ?? DEFAULT_SAMPLE_SIZE);
  const warmBonus = options.warmBonus ?? DEFAULT_WARM_BONUS;
  if (nodes instanceof NodeSampler) {
    const sample = nodes.sample(request, sampleSize, warmBonus > 0, random, options.exclude);
    if (sample !== undefined) return bestOf(sample, request, warmBonus);
    nodes = nodes.nodes;
  }
  const feasible: NodeSnapshot[] = [];
  const warm: NodeSnapshot[] = [];
  const rejected = Object.fromEntries(CONSTRAINTS.map((constraint) => [constraint, 0])) as Record<Constraint, number>;
  for (const node of nodes) {
    const unfit = unfitFor(node, request, options.exclude);
    if (unfit === undefined) {
      feasible.push(node);
      if (hasWarm(node, request)) warm.push(node);
    } else rejected[unfit] += 1;
  }
  if (feasible.length === 0) return { ok: false, rejected, reason: noNodeReason(request, nodes.length, rejected) };

  // K distinct nodes, each drawn in proportion to its size for this create: a node twice as
  // big must be offered twice as many creates, or the small ones fill up first. Prefix sums
  // and a binary search keep a draw at O(log n); a draw that repeats a node is redone
  // (at most 8K draws, so a sample can come out smaller, never wrong).
  const sample = new Set<NodeSnapshot>();
  if (feasible.length <= sampleSize) for (const node of feasible) sample.add(node);
  else {
    const prefix = new Float64Array(feasible.length);
    let total = 0;
    for (let i = 0; i < feasible.length; i++) prefix[i] = total += sizeFor(feasible[i] as NodeSnapshot, request);
    for (let draws = 0; sample.size < sampleSize && draws < sampleSize * DRAWS_PER_SAMPLED; draws += 1) {
      sample.add(feasible[drawIndex(prefix, random() * total)] as NodeSnapshot);
    }
  }
  // A few feasible nodes with a warm sandbox of the template join the sample: drawn only by
  // size, a warm node (a few in a thousand) would seldom be offered the create its warm
  // sandbox is for. They still win on the score alone (the bonus: a preference, not a veto).
  if (warmBonus > 0) addWarm(sample, warm, random);
  return bestOf(sample, request, warmBonus);
}

/** Draws per node of the sample before a draw gives up (repeats and, sampled, nodes that cannot take it). */
const DRAWS_PER_SAMPLED = 8;

/** The first index whose prefix sum exceeds `target`. */
function drawIndex(prefix: Float64Array, target: number): number {
  let low = 0;
  let high = prefix.length - 1;
  while (low < high) {
    const middle = (low + high) >>> 1;
    if ((prefix[middle] as number) > target) high = middle;
    else low = middle + 1;
  }
  return low;
}

/** Up to WARM_SAMPLE_SIZE of `warm` (feasible, warm nodes; consumed), uniformly. */
function addWarm(sample: Set<NodeSnapshot>, warm: NodeSnapshot[], random: Random): void {
  for (let added = 0; added < WARM_SAMPLE_SIZE && warm.length > 0; added += 1) {
    const index = Math.floor(random() * warm.length);
    sample.add(warm[index] as NodeSnapshot);
    warm[index] = warm[warm.length - 1] as NodeSnapshot;
    warm.pop();
  }
}

function bestOf(sample: Iterable<NodeSnapshot>, request: PlacementRequest, warmBonus: number): Placement {
  let best: { node: NodeSnapshot; score: number } | undefined;
  for (const node of sample) {
    const score = scoreOf(node, request, warmBonus);
    if (best === undefined || score < best.score) best = { node, score };
  }
  const chosen = best as { node: NodeSnapshot; score: number };
  return { ok: true, node: chosen.node, score: chosen.score, warm: hasWarm(chosen.node, request) };
}

/** Request shapes whose prefix sums a sampler keeps (a shape is the client's choice: bounded). */
const SHAPES_KEPT = 16;

/**
 * The nodes place() chooses among, kept between choices so that a choice need not look at
 * every node. Scanning 1,000 nodes cost ~0.5 ms a create on a loaded host, more than the rest
 * of the gateway's part of it (docs/benchmarks.md); the sample instead draws nodes by size
 * from ALL nodes and keeps those that can take the create until it has K: given that a node
 * can take it, it is drawn exactly as the full scan draws it (rejection sampling). When the
 * draws do not find K (a cluster nearly full, a rare runtime or template, K nodes or fewer),
 * place() scans every node as before, so a refusal always comes from the full scan.
 *
 * The snapshots are the owner's, read at each choice (health, commitment and warm counts may
 * change in place). What the sampler derives from them, the owner keeps true: sizesChanged()
 * when a node's vCPU or memory total changed, warmChanged() when a node gained warm
 * sandboxes of a template it had none of; a new or gone node needs a new sampler.
 */
export class NodeSampler {
  /** Per request shape, prefix sums of sizeFor over `nodes`. */
  private readonly prefixes = new Map<string, { prefix: Float64Array; total: number }>();
  /** Per template, the nodes that had warm sandboxes of it when built (some may have none now). */
  private warmNodes: Map<string, NodeSnapshot[]> | undefined;
  private readonly byName: ReadonlyMap<string, NodeSnapshot>;

  constructor(readonly nodes: readonly NodeSnapshot[]) {
    this.byName = new Map(nodes.map((node) => [node.name, node]));
  }

  sizesChanged(): void {
    this.prefixes.clear();
  }

  warmChanged(): void {
    this.warmNodes = undefined;
  }

  /** K distinct nodes that can take the create, with up to WARM_SAMPLE_SIZE warm ones; undefined: scan every node. */
  sample(request: PlacementRequest, sampleSize: number, withWarm: boolean, random: Random, exclude?: ReadonlySet<string>): NodeSnapshot[] | undefined {
    if (request.volumes !== undefined) {
      // Only the node holding the volumes can take it: that node, or the scan says why not.
      const holder = this.byName.get(request.volumes.node);
      return holder !== undefined && unfitFor(holder, request, exclude) === undefined ? [holder] : undefined;
    }
    if (this.nodes.length <= sampleSize) return undefined;
    const { prefix, total } = this.prefixFor(request);
    const sample = new Set<NodeSnapshot>();
    for (let draws = 0; sample.size < sampleSize && draws < sampleSize * DRAWS_PER_SAMPLED; draws += 1) {
      const node = this.nodes[drawIndex(prefix, random() * total)] as NodeSnapshot;
      if (!sample.has(node) && unfitFor(node, request, exclude) === undefined) sample.add(node);
    }
    if (sample.size < sampleSize) return undefined;
    if (withWarm) addWarm(sample, this.feasibleWarm(request, exclude), random);
    return [...sample];
  }

  private prefixFor(request: PlacementRequest): { prefix: Float64Array; total: number } {
    const shape = `${request.vcpus}/${request.memoryMiB}`;
    let sums = this.prefixes.get(shape);
    if (sums === undefined) {
      const prefix = new Float64Array(this.nodes.length);
      let total = 0;
      for (let i = 0; i < this.nodes.length; i++) prefix[i] = total += sizeFor(this.nodes[i] as NodeSnapshot, request);
      sums = { prefix, total };
      if (this.prefixes.size >= SHAPES_KEPT) this.prefixes.delete(this.prefixes.keys().next().value as string);
      this.prefixes.set(shape, sums);
    }
    return sums;
  }

  /** The nodes with a warm sandbox of the template that can take the create. */
  private feasibleWarm(request: PlacementRequest, exclude?: ReadonlySet<string>): NodeSnapshot[] {
    if (this.warmNodes === undefined) {
      this.warmNodes = new Map();
      for (const node of this.nodes) {
        for (const [template, count] of Object.entries(node.warm)) {
          if (count <= 0) continue;
          const listed = this.warmNodes.get(template);
          if (listed === undefined) this.warmNodes.set(template, [node]);
          else listed.push(node);
        }
      }
    }
    const listed = this.warmNodes.get(request.template) ?? [];
    const feasible: NodeSnapshot[] = [];
    let drained = 0;
    for (const node of listed) {
      if (!hasWarm(node, request)) drained += 1;
      else if (unfitFor(node, request, exclude) === undefined) feasible.push(node);
    }
    // Mostly drained since it was built: rebuilt at the next look, not walked again and again.
    if (drained > 8 && drained * 2 > listed.length) this.warmNodes = undefined;
    return feasible;
  }
}

const DESCRIBE: Record<Constraint, (request: PlacementRequest) => string> = {
  volumes: (request) => `not holding its volumes (on '${request.volumes?.node}')`,
  excluded: () => 'already failed this create',
  unhealthy: () => 'not heartbeating',
  draining: () => 'draining',
  runtime: (request) => `without the runtime '${request.runtime}'`,
  template: (request) => `without the template '${request.template}' built`,
  sessions: () => 'at their session limit',
  memory: (request) => `without ${request.memoryMiB} MiB of memory left`,
  cpu: (request) => `without ${request.vcpus} vCPUs left`,
};

/** "no node can take ...: of 12 nodes, 3 not heartbeating, 9 without 2048 MiB of memory left" */
export function noNodeReason(request: PlacementRequest, total: number, rejected: Readonly<Record<Constraint, number>>): string {
  const what = `${request.runtime}, template '${request.template}', ${request.memoryMiB} MiB, ${request.vcpus} vCPUs`;
  if (total === 0) return `no node can take this create (${what}): the cluster has no nodes`;
  const parts = CONSTRAINTS.filter((constraint) => rejected[constraint] > 0).map((constraint) => `${rejected[constraint]} ${DESCRIBE[constraint](request)}`);
  return `no node can take this create (${what}): of ${total} node${total === 1 ? '' : 's'}, ${parts.join(', ')}`;
}

/** A small seeded generator (mulberry32): the same seed gives the same choices. */
export function seededRandom(seed: number): Random {
  let state = seed >>> 0;
  return () => {
    state = (state + 0x6d2b79f5) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}
