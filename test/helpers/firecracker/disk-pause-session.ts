/**
 * What the Firecracker pause-to-disk test files share: a jailed (or unjailed) runtime as an
 * orchestrator (re)started makes it, a session whose guest boots under the emulator's QEMU and
 * configures the address it was leased, and SSH into it once it is up.
 */
import { writeFile } from 'node:fs/promises';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { CONFIG_FILES, renderSettings } from '../../../src/guest/contract.js';
import type { GuestImage } from '../../../src/guest/image/builder.js';
import { isProcessAlive } from '../../../src/host/process-watch.js';
import type { AddressPool } from '../../../src/network/address-pool.js';
import { ResourceNames } from '../../../src/network/names.js';
import { FirecrackerRuntime } from '../../../src/runtimes/firecracker/firecracker-runtime.js';
import { firecrackerSettingsFromEnv } from '../../../src/runtimes/firecracker/settings.js';
import type { Runtime } from '../../../src/runtimes/runtime.js';
import type { GuestTransport } from '../../../src/transport/index.js';
import type { CleanupStack } from '../../../src/util/cleanup-stack.js';
import { connectToGuest } from '../guest.js';
import { TEST_PREFIX } from '../orchestrator.js';
import { emulatorHost, sessionBase, type EmulatorWorkspace, type Recorded } from './emulator-workspace.js';

export const NAMES = new ResourceNames(TEST_PREFIX);

/** A runtime as an orchestrator (re)started makes it: nothing remembered of the VMs before it. */
export function newRuntime(workDir: string, jailed = true): FirecrackerRuntime & Runtime {
  return FirecrackerRuntime.forHost(
    NAMES,
    {
      ...firecrackerSettingsFromEnv({}),
      chrootBaseDir: path.join(workDir, 'jails'),
      vcpus: 2,
      bootTimeoutMs: 150_000,
      jailer: jailed ? 'auto' : 'off',
    },
    emulatorHost(jailed),
  );
}

/** A session's base (sessionBase), its guest told its address and display, and where its jail's root is. */
export async function prepareSession(runtime: FirecrackerRuntime, workDir: string, pool: AddressPool, cleanup: CleanupStack, image: GuestImage) {
  const { sessionId, sessionDir, configDir, lease, spec } = await sessionBase(runtime, workDir, pool, cleanup, image, { width: 800, height: 600 });
  // What the session layer tells its guest: the address it configures, the display to start.
  await writeFile(
    path.join(configDir, CONFIG_FILES.settings),
    renderSettings({
      SANDBOX_ID: sessionId,
      SANDBOX_HOSTNAME: `sbx-${sessionId}`,
      SANDBOX_DISPLAY: 99,
      SANDBOX_WIDTH: 800,
      SANDBOX_HEIGHT: 600,
      SANDBOX_DEPTH: 24,
      SANDBOX_NET_CONFIGURE: 1,
      SANDBOX_ADDRESS: `${lease.guest}/${lease.prefixLength}`,
      SANDBOX_GATEWAY: lease.gateway,
      SANDBOX_TRANSPORT: 'tcp',
    }),
  );
  return { sessionId, sessionDir, configDir, lease, spec, jailRoot: path.join(workDir, 'jails', 'firecracker', `${TEST_PREFIX}${sessionId}`, 'root') };
}

/** SSH with the session's keys and pinned host key, tried until `withinMs` (a TCG guest boots slowly). */
export async function connectWhenUp(workDir: string, sessionId: string, address: string, withinMs: number): Promise<GuestTransport> {
  const deadline = Date.now() + withinMs;
  for (;;) {
    try {
      return await connectToGuest(workDir, sessionId, address);
    } catch (err) {
      if (Date.now() > deadline) throw err;
      await sleep(1000);
    }
  }
}

/** A process that has ended holds no RAM or CPU (a zombie not yet reaped by its parent counts as ended). */
export async function ended(pid: number, startTime: string | undefined): Promise<boolean> {
  return startTime !== undefined && !(await isProcessAlive(pid, startTime));
}

/** The calls of each VMM process of a session in turn (a resume from disk is a new one). */
export async function callsByProcess(workspace: EmulatorWorkspace, sessionId: string): Promise<Recorded[][]> {
  const byProcess: Recorded[][] = [];
  for (const r of await workspace.records(sessionId)) {
    if (r.process) byProcess.push([]);
    else byProcess.at(-1)?.push(r);
  }
  return byProcess;
}

/** The calls the VMM took (answered 2xx). */
export const accepted = (calls: Recorded[]): Recorded[] => calls.filter((r) => (r.status ?? 500) < 300);
