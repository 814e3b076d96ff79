import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { Metrics } from '../../src/metrics/metrics.js';
import { ResourceNames } from '../../src/network/names.js';
import { CapacityGate } from '../../src/sessions/capacity.js';
import { SessionManager, type ManagerOptions } from '../../src/sessions/manager.js';
import { SessionStore } from '../../src/sessions/store.js';
import { FAKE_IMAGE, FakeHost, FakeRuntime, silentLogger } from './fake-runtime.js';

/** A real SessionManager (lifecycle, pool, SQLite store, address allocator) over the fake runtime and host. */
export interface FakeRig {
  manager: SessionManager;
  runtime: FakeRuntime;
  host: FakeHost;
  store: SessionStore;
  metrics: Metrics;
}

let rigs = 0;

/**
 * The unit tier's manager: 4 sessions on the host, 3 a tenant, one `minimal` template (others
 * refused as the real source refuses them), a reaper every 20 ms; `options` override any of it.
 * `prefix` and `subnet` keep each test file's names apart; the store is a new file in `dir`.
 */
export async function fakeManager(
  dir: string,
  names: { prefix: string; subnet: string },
  options: Partial<ManagerOptions> & { start?: boolean; store?: SessionStore; runtime?: FakeRuntime } = {},
): Promise<FakeRig> {
  const store = options.store ?? new SessionStore(path.join(dir, `sessions-${++rigs}.db`));
  const runtime = options.runtime ?? new FakeRuntime();
  const host = new FakeHost(runtime, store);
  const metrics = new Metrics();
  const manager = new SessionManager({
    settle: { maxMs: 0, intervalMs: 0 },
    stateDir: dir,
    names: new ResourceNames(names.prefix),
    display: 99,
    // Only looked at (ip addr show), never configured: the fake host makes no network.
    subnet: names.subnet,
    defaultTimeoutSeconds: 300,
    maxLifetimeSeconds: 3600,
    bootTimeoutMs: 10_000,
    memoryMiB: 256,
    pidsLimit: 64,
    runtime,
    image: FAKE_IMAGE,
    templates: {
      resolve: (name) =>
        name === 'minimal' ? Promise.resolve({ name, image: FAKE_IMAGE }) : Promise.reject(new Error(`unknown template "${name}"; available: minimal`)),
    },
    defaultTemplate: 'minimal',
    store,
    metrics,
    log: silentLogger(),
    capacity: new CapacityGate({ maxSessions: 4, maxSessionsPerTenant: 3, sessionMemoryMiB: 256, memoryReserveMiB: 0 }, () => undefined),
    reaperIntervalMs: 20,
    host,
    ...options,
  });
  if (options.start !== false) await manager.start();
  return { manager, runtime, host, store, metrics };
}

/** Waits (polling every 5 ms) until `done` holds; throws naming `what` after `timeoutMs`. */
export async function until(what: string, done: () => boolean, timeoutMs = 5_000): Promise<void> {
  const end = Date.now() + timeoutMs;
  while (!done()) {
    if (Date.now() > end) throw new Error(`timed out waiting for: ${what}`);
    await sleep(5);
  }
}
