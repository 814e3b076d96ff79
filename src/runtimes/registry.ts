import type { ResourceNames } from '../network/names.js';
import type { Env } from '../util/env.js';
import { RECLAIM_STAGES, type ReclaimStage, type ResourceKindEntry, type RuntimeEntry } from './entry.js';
import { RuntimeUnavailableError, type Runtime } from './runtime.js';

/** Any registered entry (its settings are only handed back to its own functions). */
export type AnyRuntimeEntry = RuntimeEntry<string, unknown, string>;

type SettingsOf<E> = E extends RuntimeEntry<string, infer S, string> ? S : never;
type KindOf<E> = E extends RuntimeEntry<string, unknown, infer K> ? K : never;

/** Every registered runtime's settings, by name: `config.runtimes.qemu` is a QemuSettings. */
export type SettingsByRuntime<E extends readonly AnyRuntimeEntry[]> = { [Entry in E[number] as Entry['name']]: SettingsOf<Entry> };
export type NameOf<E extends readonly AnyRuntimeEntry[]> = E[number]['name'];
export type ResourceKindOf<E extends readonly AnyRuntimeEntry[]> = KindOf<E[number]>;

export interface RuntimeSelection {
  runtime: Runtime;
  /** Why this runtime was picked, for the start-up log. */
  reason: string;
}

/** A runtime name must be usable as is in env values, CLI choices, URLs and log fields. */
const NAME = /^[a-z][a-z0-9-]{0,30}$/;

/**
 * The runtimes this build can run, and everything derived from them: the names the settings,
 * the CLI and the API accept, each runtime's settings, `auto`'s choice, and the reclaimer of
 * every kind of resource a runtime records. registered.ts makes the one instance the service
 * uses; a test makes its own with a toy entry.
 */
export class RuntimeRegistry<const E extends readonly AnyRuntimeEntry[]> {
  readonly names: ReadonlyArray<NameOf<E>>;
  /** What SBX_RUNTIME and `--runtime` accept: `auto`, then each name. */
  readonly choices: ReadonlyArray<'auto' | NameOf<E>>;
  /** The runtimes `auto` tries, most preferred first. */
  readonly autoOrder: ReadonlyArray<NameOf<E>>;
  private readonly kinds = new Map<string, ResourceKindEntry>();

  constructor(readonly entries: E) {
    const seen = new Set<string>();
    for (const entry of entries) {
      if (!NAME.test(entry.name) || entry.name === 'auto') throw new Error(`runtime name ${JSON.stringify(entry.name)} must match ${NAME} and not be "auto"`);
      if (seen.has(entry.name)) throw new Error(`runtime ${entry.name} is registered twice`);
      seen.add(entry.name);
      for (const [kind, reclaimer] of Object.entries<ResourceKindEntry>(entry.resources)) {
        const other = this.kinds.get(kind);
        if (other && other !== reclaimer)
          throw new Error(`resource kind ${kind} of runtime ${entry.name} has another reclaimer already: share one (host-resources.ts) or name the kind apart`);
        if (!RECLAIM_STAGES.includes(reclaimer.stage))
          throw new Error(`resource kind ${kind} of runtime ${entry.name} has an unknown stage ${reclaimer.stage}`);
        this.kinds.set(kind, reclaimer);
      }
    }
    this.names = entries.map((entry) => entry.name as NameOf<E>);
    this.choices = ['auto', ...this.names];
    this.autoOrder = entries
      .filter((entry) => entry.autoRank !== undefined)
      .sort((a, b) => (a.autoRank as number) - (b.autoRank as number))
      .map((entry) => entry.name as NameOf<E>);
  }

  entry<N extends NameOf<E>>(name: N): Extract<E[number], { name: N }> {
    const found = this.entries.find((entry) => entry.name === name);
    if (!found) throw new Error(`no runtime ${name} is registered`);
    return found as Extract<E[number], { name: N }>;
  }

  /** Every runtime's settings, read and checked (`auto` may pick any, and a bad value fails the start). */
  settingsFromEnv(env: Env): SettingsByRuntime<E> {
    return Object.fromEntries(this.entries.map((entry) => [entry.name, entry.settingsFromEnv(env)])) as SettingsByRuntime<E>;
  }

  /** The vCPUs one session of `name` gets, with these settings. */
  vcpus(name: NameOf<E>, settings: SettingsByRuntime<E>): number {
    return this.entry(name).vcpus(this.settingsOf(name, settings));
  }

  vcpusByRuntime(settings: SettingsByRuntime<E>): Record<NameOf<E>, number> {
    return Object.fromEntries(this.names.map((name) => [name, this.vcpus(name, settings)])) as Record<NameOf<E>, number>;
  }

  /** The reclaimer of a kind of resource on the ledger, or undefined if no runtime records it. */
  resourceKind(kind: string): ResourceKindEntry | undefined {
    return this.kinds.get(kind);
  }

  /** The runtime kinds with their stages, in registration order. */
  resourceKinds(): Array<{ kind: ResourceKindOf<E>; stage: ReclaimStage }> {
    return [...this.kinds].map(([kind, entry]) => ({ kind: kind as ResourceKindOf<E>, stage: entry.stage }));
  }

  /**
   * Makes the runtime asked for, or `auto`'s: the first in autoOrder whose probe finds nothing
   * missing and whose create succeeds; each passed over says why in the reason.
   */
  async select(choice: 'auto' | NameOf<E>, names: ResourceNames, settings: SettingsByRuntime<E>): Promise<RuntimeSelection> {
    if (choice !== 'auto') {
      const entry = this.entry(choice);
      const runtime = await entry.create(names, this.settingsOf(choice, settings), false);
      return { runtime, reason: `requested with --runtime ${choice}; ${runtime.describe()}` };
    }
    const passedOver: string[] = [];
    for (const name of this.autoOrder) {
      const entry = this.entry(name);
      const own = this.settingsOf(name, settings);
      const missing = await entry.probe?.(own);
      if (missing) {
        passedOver.push(`${name}: ${missing}`);
        continue;
      }
      try {
        const runtime = await entry.create(names, own, true);
        return { runtime, reason: `auto: ${runtime.describe()}${passedOver.length > 0 ? ` (passed over ${passedOver.join('; ')})` : ''}` };
      } catch (err) {
        passedOver.push(`${name}: ${(err as Error).message}`);
      }
    }
    throw new RuntimeUnavailableError('auto', `none of ${this.autoOrder.join(', ')} can run here (${passedOver.join('; ')})`);
  }

  private settingsOf(name: string, settings: SettingsByRuntime<E>): unknown {
    const own = (settings as Record<string, unknown>)[name];
    if (own === undefined) throw new Error(`no settings for runtime ${name}`);
    return own;
  }
}
