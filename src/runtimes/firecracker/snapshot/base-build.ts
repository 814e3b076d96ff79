import { rm, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { CONFIG_FILES, GUEST_USER, renderSettings, sandboxSettings } from '../../../guest/contract.js';
import type { GuestImage } from '../../../guest/image/builder.js';
import type { ResourceNames } from '../../../network/names.js';
import { createSandboxNetwork, type SandboxNetwork } from '../../../network/netns.js';
import { generateSessionKeys, publicKeyBlob, writeSessionKeys } from '../../../transport/ssh-keys.js';
import { guestTransport, type GuestEndpoint } from '../../../transport/index.js';
import { CleanupStack } from '../../../util/cleanup-stack.js';
import type { SandboxSpec, PreparedGuest } from '../../runtime.js';
import type { VmUserPool } from '../../vm/vm-user-pool.js';
import type { BootedVm } from '../firecracker-runtime.js';
import { runSteps } from '../boot/steps.js';
import { snapshotCreateSteps } from '../boot/snapshot-steps.js';
import { snapshotBaseAddress } from './clone-rotation.js';
import { writeBaseRootKey } from './base-config.js';
import { saveSnapshotBase, type SnapshotBase, type SnapshotBaseTransport } from './base-store.js';

/** What building a snapshot base takes from the runtime: its names, its VM users, its boot. */
export interface SnapshotBaseBuildDeps {
  names: ResourceNames;
  users: VmUserPool;
  memoryMiB: number;
  /** The guest settings every sandbox of this orchestrator gets (its display, its pids limit). */
  guest: PreparedGuest;
  bootTimeoutMs: number;
  /** vsock: the snapshot base (and so every clone) has no NIC, and is reached over vsock. */
  transport: SnapshotBaseTransport;
  boot(spec: SandboxSpec, cleanup: CleanupStack): Promise<BootedVm>;
}

/**
 * Boots a base VM (its own keys, plus its key's root access to sbx-rekey; the fixed
 * snapshotBaseAddress of our prefix, or no NIC over vsock), waits until its desktop answers, pauses it, snapshots it, and keeps
 * the snapshot with the root disk as it was at the pause. Everything else goes.
 */
export async function buildSnapshotBase(
  image: GuestImage,
  screen: { width: number; height: number },
  dir: string,
  deps: SnapshotBaseBuildDeps,
): Promise<SnapshotBase> {
  const cleanup = new CleanupStack();
  const sessionId = `tpl${image.hash.slice(0, 7)}`;
  const sessionDir = `${dir}.work`;
  const configDir = path.join(sessionDir, 'config');
  const address = snapshotBaseAddress(deps.names.prefix);
  const vsock = deps.transport === 'vsock';
  try {
    await rm(sessionDir, { recursive: true, force: true });
    await cleanup.push('template work dir', () => rm(sessionDir, { recursive: true, force: true }));
    const keys = generateSessionKeys(`template-${image.hash}`);
    await writeSessionKeys(sessionDir, configDir, keys);
    await writeBaseRootKey(configDir, keys.clientPublicKey);
    await writeFile(
      path.join(configDir, CONFIG_FILES.settings),
      // The same settings a session's guest gets (sessions/boot.ts), at the snapshot base's address.
      renderSettings(
        sandboxSettings({
          id: sessionId,
          hostname: 'sbx-template',
          display: deps.guest.display,
          screen,
          guestConfiguresNetwork: true,
          lease: vsock ? undefined : address,
          transport: deps.transport,
        }),
      ),
    );
    const lease = { index: 0, ...address };
    const vmUser = await deps.users.lease(cleanup);
    const network: SandboxNetwork = vsock ? { attachment: 'none' } : await createSandboxNetwork(deps.names, sessionId, lease, cleanup, 'tap', vmUser);
    const spec: SandboxSpec = {
      sessionId,
      image,
      sessionDir,
      configDir,
      screen,
      hostname: 'sbx-template',
      network,
      memoryMiB: deps.memoryMiB,
      pidsLimit: deps.guest.pidsLimit,
      logsDir: path.join(sessionDir, 'logs'),
      vmUser,
    };
    const vm = await deps.boot(spec, cleanup);
    if (!vm.layout) throw new Error('a template needs the jailer');
    await waitForDesktop(vm.sandbox.endpoint, keys, deps.guest.display, Date.now() + deps.bootTimeoutMs, () => vm.sandbox.isAlive());
    await runSteps(snapshotCreateSteps(vm.layout.snapshot.jailPaths), vm.client);
    await vm.vmm.stop(500); // paused: there is no guest to power off
    return await saveSnapshotBase(dir, image, {
      files: vm.layout.snapshot.hostPaths,
      rootfs: path.join(vm.layout.rootDir, vm.layout.vmPaths.rootfsPath),
      keys: { clientPrivateKey: keys.clientPrivateKey, hostPublicKey: keys.hostPublicKey },
      screen,
      address,
      transport: deps.transport,
    });
  } finally {
    await cleanup.run();
  }
}

/** Waits until the guest at `endpoint` lets the keys in and its display answers. */
async function waitForDesktop(
  endpoint: GuestEndpoint,
  keys: { clientPrivateKey: string; hostPublicKey: string },
  display: number,
  deadline: number,
  isAlive: () => boolean,
): Promise<void> {
  const connection = guestTransport({
    endpoint,
    username: GUEST_USER,
    privateKey: keys.clientPrivateKey,
    pinnedHostKey: publicKeyBlob(keys.hostPublicKey),
  });
  try {
    await connection.open(Math.max(1, deadline - Date.now()), isAlive);
    while (Date.now() < deadline) {
      if (!isAlive()) throw new Error('the template VM exited before its desktop answered');
      // A probe that fails or takes too long (a busy host) is tried again, until the deadline.
      const answered = await connection.exec(`DISPLAY=:${display} xdpyinfo >/dev/null 2>&1`, { timeoutMs: 10_000 }).then(
        (probe) => probe.exitCode === 0,
        () => false,
      );
      if (answered) return;
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
    throw new Error("the template VM's desktop did not answer in time");
  } finally {
    connection.close();
  }
}
