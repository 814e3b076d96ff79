/**
 * A toy runtime, as a runtime author would write one (docs/runtimes.md, "Adding a runtime"):
 * its Runtime, its entry, one kind of resource of its own. test/unit/runtime-registry.test.ts
 * registers it with one line and checks that the whole service sees it.
 */
import { rm } from 'node:fs/promises';
import type { RuntimeEntry } from '../../src/runtimes/entry.js';
import type { RunningSandbox, Runtime, RuntimeCapabilities, RuntimeName } from '../../src/runtimes/runtime.js';
import { envInt, type Env } from '../../src/util/env.js';

export interface ToySettings {
  /** SBX_TOY_VCPUS (default 3). */
  vcpus: number;
}

/** A runtime that runs nothing: enough to be selected, described and asked for its sandboxes. */
class ToyRuntime implements Runtime {
  // Not a RuntimeName of this build (the registration is the test's): said so once, here.
  readonly name = 'toy' as RuntimeName;
  readonly capabilities: RuntimeCapabilities = {
    networkAttachment: 'veth',
    guestConfiguresNetwork: false,
    configDirIsLive: true,
    bootTimeoutMs: 0,
    hostOnlySources: [],
    sharesHostKernel: true,
  };

  constructor(readonly settings: ToySettings) {}

  describe(): string {
    return `toy (${this.settings.vcpus} vCPUs of nothing)`;
  }

  start(): Promise<RunningSandbox> {
    return Promise.reject(new Error('the toy runtime starts no sandbox'));
  }

  list = async (): Promise<string[]> => [];
  adopt = async (): Promise<undefined> => undefined;
  reclaim = async (): Promise<void> => undefined;
}

const RESOURCES = {
  /** A file of the toy's own: the ledger removes it after a crash. */
  'toy-file': { stage: 'files', reclaim: (name: string) => rm(name, { force: true }) },
} as const;

export const toyRuntime: RuntimeEntry<'toy', ToySettings, keyof typeof RESOURCES> = {
  name: 'toy',
  features: { desktop: false, pause: false, vsock: false },
  autoRank: 1,
  settingsFromEnv: (env: Env) => ({ vcpus: envInt('SBX_TOY_VCPUS', 3, env) }),
  vcpus: (settings) => settings.vcpus,
  create: async (_names, settings) => new ToyRuntime(settings),
  resources: RESOURCES,
};
