import { containerRuntime } from './container/entry.js';
import { firecrackerRuntime } from './firecracker/entry.js';
import { qemuRuntime } from './qemu/entry.js';
import { RuntimeRegistry, type NameOf, type ResourceKindOf, type SettingsByRuntime } from './registry.js';

/**
 * The runtimes of this build: one line each (docs/runtimes.md, "Adding a runtime"). The order
 * is the API's enum order; `auto` goes by each entry's autoRank.
 */
export const RUNTIMES = new RuntimeRegistry([containerRuntime, qemuRuntime, firecrackerRuntime]);

type Registered = typeof RUNTIMES.entries;
export type RuntimeName = NameOf<Registered>;
/** SBX_RUNTIME: `auto` or a runtime's name. */
export type RuntimeChoice = 'auto' | RuntimeName;
export type RuntimeSettingsMap = SettingsByRuntime<Registered>;
/** The kinds of host resource the runtimes record on the ledger (the session layer adds its own). */
export type RuntimeResourceKind = ResourceKindOf<Registered>;
