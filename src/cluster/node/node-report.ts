import os from 'node:os';
import type { RuntimeName } from '../../runtimes/runtime.js';
import type { NodeReport } from '../store/cluster-store.js';

/** What the report is made of: the node's settings and its catalogue of templates. */
export interface NodeFacts {
  url: string;
  runtime: RuntimeName;
  maxSessions: number;
  /** One session's memory limit (SBX_MEMORY_MIB). */
  sessionMemoryMiB: number;
  /** Memory kept for the host (SBX_MEMORY_RESERVE_MIB). */
  memoryReserveMiB: number;
  /** vCPUs one session is given (a container's share counts as one). */
  sessionVcpus: number;
  /** vCPUs the node offers: its CPUs times the overcommit it accepts (SBX_NODE_VCPUS). */
  vcpus: number;
  version: string;
  /** Names of the templates built on this node. */
  templates(): Promise<string[]>;
  /** Warm sandboxes ready to be claimed, per template (its warm pools). */
  warm?(): Record<string, number>;
}

/** The default vCPUs a node offers: sandboxes of agents mostly wait on their model, so 4 per CPU. */
export function defaultNodeVcpus(cpus = os.availableParallelism()): number {
  return cpus * 4;
}

/**
 * A node's report. Memory offered is the host's less its reserve; the node's own admission
 * (sessions/capacity.ts) still has the last word on each create, with MemAvailable.
 * Warm sandboxes are the pools' ready ones: a gateway's create takes one under the pooled
 * sandbox's own id (its resources are named by it), which the gateway then records.
 */
export async function nodeReport(facts: NodeFacts): Promise<NodeReport> {
  return {
    url: facts.url,
    runtimes: [facts.runtime],
    templates: await facts.templates(),
    warm: facts.warm?.() ?? {},
    maxSessions: facts.maxSessions,
    memoryMiB: Math.max(0, Math.floor(os.totalmem() / 2 ** 20) - facts.memoryReserveMiB),
    vcpus: facts.vcpus,
    sessionMemoryMiB: facts.sessionMemoryMiB,
    sessionVcpus: facts.sessionVcpus,
    version: facts.version,
  };
}
