import type { ResourceNames } from '../../../network/names.js';
import type { CleanupStack } from '../../../util/cleanup-stack.js';
import type { SandboxSpec } from '../../runtime.js';
import { removeVmCgroups, vmCgroupDirs } from '../../vm/cgroups.js';
import type { VmUserPool } from '../../vm/vm-user-pool.js';
import { lendVolumes } from '../../vm/vm-volumes.js';
import type { SnapshotFiles } from '../boot/snapshot-steps.js';
import type { FirecrackerHost } from '../host/host-check.js';
import { applyChrootLayout, removeChroot } from '../jailer/apply-chroot.js';
import { chrootLayout } from '../jailer/chroot-layout.js';
import type { FirecrackerSettings } from '../settings.js';
import { launchJailer } from './jailed.js';
import type { LaunchedVmm, VmmFiles } from './unjailed.js';

export interface JailedVmDeps {
  names: ResourceNames;
  settings: FirecrackerSettings;
  host: FirecrackerHost;
  users: VmUserPool;
  /** Every VM's cgroup sits under it. */
  parentCgroup: string;
}

/** What a restored VM's jail is made from: a snapshot's rootfs (copied in) and its state and memory (linked). */
export interface JailRestore {
  rootfs: string;
  files: SnapshotFiles;
}

/**
 * A VM's jail (its layout applied, owned by its uid), its cgroups and its jailed VMM, each
 * release pushed onto `cleanup` before it is taken. `restore`: a snapshot base's or a fork's
 * snapshot, whose rootfs the jail's copy is made from (a restored VM's disk must be its
 * snapshot's as it was at the pause, not the image's) and whose files are linked in.
 */
export async function launchJailedVm(
  deps: JailedVmDeps,
  spec: SandboxSpec,
  cleanup: CleanupStack,
  id: string,
  netns: string,
  files: VmmFiles,
  restore?: JailRestore,
): Promise<LaunchedVmm> {
  const { host, settings, users, parentCgroup } = deps;
  const firecrackerBin = host.firecrackerBin;
  const layout = chrootLayout({
    chrootBaseDir: settings.chrootBaseDir,
    firecrackerBin,
    id,
    kernel: files.kernel,
    initrd: files.initrd,
    rootfsSource: restore ? restore.rootfs : spec.image.ext4,
    configDrive: files.configDrive,
    restoreFrom: restore?.files,
    volumes: spec.volumes,
  });
  // Leased by the session layer before the network (it owns the TAP); else here.
  const user = spec.vmUser ?? (await users.lease(cleanup, spec.record));
  spec.record?.('jail', layout.jailDir);
  // The volumes are the jail's while it runs (hard links share their owner): root's again after,
  // by this cleanup, or after a restart by the reclaim (the session dir's list) or the ledger.
  await lendVolumes(spec.sessionDir, spec.volumes ?? [], cleanup, spec.record);
  await cleanup.push(`jail ${layout.jailDir}`, () => removeChroot(layout));
  await applyChrootLayout(layout, user);
  spec.step?.('runtime: jail (its layout: links, the root disk copied)');
  const cgroupVersion = host.cgroupVersion;
  for (const dir of await vmCgroupDirs(cgroupVersion, parentCgroup, id)) spec.record?.('cgroup', dir);
  // Runs after the VMM is gone (pushed before it): a cgroup with a process in it cannot go.
  await cleanup.push(`cgroup ${parentCgroup}/${id}`, () => removeVmCgroups(cgroupVersion, parentCgroup, id));
  const vmm = await launchJailer({
    names: deps.names,
    jailerBin: host.jailerBin as string,
    firecrackerBin,
    chrootBaseDir: settings.chrootBaseDir,
    cgroupVersion,
    parentCgroup,
    id,
    sessionId: spec.sessionId,
    rootDir: layout.rootDir,
    user,
    netns,
    limits: { memoryMiB: spec.memoryMiB, vcpus: settings.vcpus },
    consolePipe: files.consolePipe,
    apiTimeoutMs: settings.apiTimeoutMs,
  });
  return { vmm, apiSocket: layout.apiSocket.hostPath, paths: layout.vmPaths, layout };
}
