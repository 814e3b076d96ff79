import type { Logger } from 'pino';
import type { ResourceNames } from '../network/names.js';
import type { Env } from '../util/env.js';
import type { Runtime } from './runtime.js';

/**
 * What a runtime registers (containerd's plugin model, reduced to data and a few functions):
 * everything the rest of the service needs to know about a backend without naming it. One
 * entry per runtime, in the runtime's own folder; registered.ts lists them. docs/runtimes.md
 * ("Adding a runtime") says what each field is for. Declare an entry with its type written
 * out (`RuntimeEntry<'name', Settings, Kinds>`): the registry derives the name and kind unions
 * from it, and an inferred type would depend on those unions in turn.
 */
export interface RuntimeEntry<Name extends string = string, Settings = unknown, Kind extends string = string> {
  /** The name in SBX_RUNTIME, `--runtime`, the API's `runtime` field and the ledger. */
  readonly name: Name;
  /** What its sessions can do, as clients and the layers above may ask. */
  readonly features: RuntimeFeatures;
  /**
   * Its place in `SBX_RUNTIME=auto`'s order, lowest first; undefined: used only when asked
   * for by name. Auto tries each in order and takes the first whose probe and create pass.
   */
  readonly autoRank?: number;
  /** Reads and checks its settings (every runtime's are read at start-up: see settings.ts). */
  settingsFromEnv(env: Env): Settings;
  /** The vCPUs one of its sessions gets, as a cluster's gateway counts them for placement. */
  vcpus(settings: Settings): number;
  /** Why `auto` must pass over it on this host (a cheap look), or undefined to try create. */
  probe?(settings: Settings): Promise<string | undefined>;
  /**
   * Checks the host and makes the runtime, or throws a RuntimeUnavailableError saying what is
   * missing. `auto`: it was picked by SBX_RUNTIME=auto rather than asked for by name.
   */
  create(names: ResourceNames, settings: Settings, auto: boolean): Promise<Runtime>;
  /**
   * The kinds of host resource its sandboxes record on the ledger (SandboxSpec.record), and
   * how each is reclaimed after a crash. A kind two runtimes share (a process, a mount) must be
   * reclaimed by the same entry object (host-resources.ts); the registry checks it.
   */
  readonly resources: Readonly<Record<Kind, ResourceKindEntry>>;
}

/** What a runtime's sessions can do. Static per runtime (a host's limits are in RuntimeCapabilities). */
export interface RuntimeFeatures {
  /** The guest runs the X desktop (screenshots, input, the live view). */
  readonly desktop: boolean;
  /** A running sandbox can be paused and resumed. */
  readonly pause: boolean;
  /** The guest can be reached over vsock (or a Unix socket) instead of its network. */
  readonly vsock: boolean;
}

/**
 * When a kind of resource is reclaimed, in this order: processes first (they hold the rest),
 * then a runtime's own state, mounts, files, cgroups (empty once their processes are gone),
 * the network, the session directory, and last the leases nothing on the host holds.
 */
export const RECLAIM_STAGES = ['processes', 'runtime-state', 'mounts', 'files', 'cgroups', 'network', 'session-dir', 'leases'] as const;
export type ReclaimStage = (typeof RECLAIM_STAGES)[number];

export interface ResourceKindEntry {
  readonly stage: ReclaimStage;
  /** Removes the resource recorded as `name`. Idempotent: it may be gone already. */
  reclaim(name: string, ctx: ReclaimContext): Promise<void>;
}

/** What the ledger lends a reclaimer. */
export interface ReclaimContext {
  readonly log: Logger;
  /** Removes a directory the way the session layer removes session dirs (never through a mount). */
  removeDir(dir: string): Promise<void>;
}
