import { mkdtemp, readdir, rmdir } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { pino, type Logger } from 'pino';
import { isLoopbackAddress } from '../../src/api/auth/auth-mode.js';
import { openKeyStore } from '../../src/api/auth/key-store-file.js';
import { defaultConfig, type OrchestratorConfig } from '../../src/config.js';
import { startOrchestrator, type Orchestrator } from '../../src/orchestrator.js';
import type { RuntimeSelection } from '../../src/runtimes/registry.js';
import { removeTreeOnOneMount } from '../../src/host/remove-tree.js';
import { watchUncaught } from './uncaught-guard.js';

/**
 * A resource prefix of this test process's own ("t" and two random letters), so that test
 * files run in parallel, or beside a dev orchestrator, never reclaim each other's sandboxes.
 */
export const TEST_PREFIX =
  process.env.SBX_RESOURCE_PREFIX || `t${String.fromCharCode(97 + Math.floor(Math.random() * 26))}${String.fromCharCode(97 + Math.floor(Math.random() * 26))}-`;

/**
 * Guest addresses of this test process's own (a random /24), so that orchestrators of test
 * files running in parallel never lease the same block and route to each other's guests.
 */
export const TEST_SUBNET = `10.242.${Math.floor(Math.random() * 256)}.0/24`;

/**
 * Every real-sandbox test process watches for errors that reach the process uncaught: in the
 * orchestrator such an error ends every tenant's sessions (issue 21), so here it fails the
 * test that stops the orchestrator, naming it, instead of a silent exit or a stray failure.
 */
const uncaught = watchUncaught();

export interface TestOrchestrator extends Orchestrator {
  stateDir: string;
  /**
   * Headers for requests: an API key of tenant "test" when the orchestrator binds a
   * non-loopback address (it refuses to start keyless there), else none (keyless, "local").
   */
  authHeaders: Record<string, string>;
  /** Closes the orchestrator (destroying its sessions) and removes its state dir. */
  stop(): Promise<void>;
}

/**
 * Starts a real orchestrator (real runc sandboxes) with its own state dir, on the shared
 * guest image. It does not listen unless asked: HTTP tests use inject().
 */
export async function startTestOrchestrator(
  overrides: Partial<OrchestratorConfig> = {},
  listen = false,
  runtime?: RuntimeSelection,
  logger?: Logger,
): Promise<TestOrchestrator> {
  const stateDir = await mkdtemp(path.join(os.tmpdir(), 'sbx-test-'));
  const base = defaultConfig(process.env);
  const config: OrchestratorConfig = {
    ...base,
    host: '127.0.0.1',
    port: 0,
    stateDir,
    imagesDir: process.env.SBX_IMAGES_DIR || '/var/lib/sandboxes/images',
    subnet: TEST_SUBNET,
    runtime: 'container',
    resourcePrefix: TEST_PREFIX,
    // The fast template, whatever SBX_TEMPLATE says: tests of the desktop's content ask for
    // `desktop` in their overrides (test/desktop.test.ts).
    template: 'minimal',
    ...overrides,
  };
  const authHeaders: Record<string, string> = {};
  if (!isLoopbackAddress(config.host)) {
    const opened = openKeyStore(stateDir);
    authHeaders.authorization = `Bearer ${opened.keys.create('test').key}`;
    opened.close();
  }
  const log = logger ?? pino({ level: process.env.SBX_TEST_LOG_LEVEL || 'silent' });
  // A start refused (a test of bad settings) leaves no state dir behind.
  const orchestrator = await startOrchestrator(config, log, { buildImageIfMissing: false, listen, runtime }).catch(async (err: unknown) => {
    await removeTreeOnOneMount(stateDir).catch(() => undefined);
    throw err;
  });
  return {
    ...orchestrator,
    stateDir,
    authHeaders,
    async stop() {
      await orchestrator.close();
      // Never a recursive delete through a mount: a view of the shared image left mounted
      // (a session whose destroy failed) would otherwise be walked into. It throws instead.
      await removeTreeOnOneMount(stateDir);
      // runc's state dir of this test's prefix, once empty (rmdir refuses a non-empty one).
      await rmdir(orchestrator.names.runcRoot).catch(() => undefined);
      await rmdir(orchestrator.names.rootfsRoot).catch(() => undefined);
      await removeEmptyPrefixCgroups();
      uncaught.assertNone();
    },
  };
}

/**
 * The parent cgroup of this test process's sandboxes (`/<controller>/<prefix>`), once empty:
 * every test process has its own prefix, so each would leave one behind otherwise.
 */
export async function removeEmptyPrefixCgroups(): Promise<void> {
  const parent = TEST_PREFIX.slice(0, -1);
  const controllers = await readdir('/sys/fs/cgroup').catch(() => [] as string[]);
  for (const dir of [path.join('/sys/fs/cgroup', parent), ...controllers.map((c) => path.join('/sys/fs/cgroup', c, parent))]) {
    await rmdir(dir).catch(() => undefined); // not there, or still in use: both fine
  }
}
