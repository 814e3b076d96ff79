import { rm } from 'node:fs/promises';
import path from 'node:path';
import type { CleanupStack } from '../../../util/cleanup-stack.js';
import { run } from '../../../util/exec.js';
import type { ConsolePipe } from '../../console-pipe.js';
import type { SandboxSpec } from '../../runtime.js';
import { spawnInNetns, type VmProcess } from '../../vm/vm-process.js';
import type { ChrootLayout, VmPaths } from '../jailer/chroot-layout.js';
import { SESSION_VSOCK_SOCKET } from '../vsock.js';

/** The guest paths Firecracker is given, and how to reach its API. */
export interface LaunchedVmm {
  vmm: VmProcess;
  apiSocket: string;
  paths: VmPaths;
  /** Jailed VMs only. */
  layout?: ChrootLayout;
  /** Where the host dials its vsock socket, once known (firecracker-runtime.ts vsockSocket). */
  vsockHostPath?: string;
}

/** The files a VMM boots from. */
export interface VmmFiles {
  kernel: string;
  initrd?: string;
  configDrive: string;
  consolePipe: ConsolePipe;
}

/** A VMM without the jailer (development hosts only: the runtime refuses it elsewhere): its files in the session dir, in the session's netns. */
export async function launchUnjailed(
  firecrackerBin: string,
  spec: SandboxSpec,
  cleanup: CleanupStack,
  id: string,
  netns: string,
  files: VmmFiles,
): Promise<LaunchedVmm> {
  const rootfs = path.join(spec.sessionDir, 'rootfs.ext4');
  const apiSocket = path.join(spec.sessionDir, 'firecracker.socket');
  const vsock = path.join(spec.sessionDir, SESSION_VSOCK_SOCKET);
  await cleanup.push(`root disk ${rootfs}`, () => rm(rootfs, { force: true }));
  await run(['cp', '--reflink=auto', '--sparse=always', '--', spec.image.ext4, rootfs]);
  await cleanup.push('api and vsock sockets', async () => {
    await rm(apiSocket, { force: true });
    await rm(vsock, { force: true });
  });
  const vmm = spawnInNetns(netns, firecrackerBin, ['--api-sock', apiSocket, '--id', id], files.consolePipe);
  return {
    vmm,
    apiSocket,
    paths: {
      kernelImagePath: files.kernel,
      ...(files.initrd ? { initrdPath: files.initrd } : {}),
      rootfsPath: rootfs,
      configDrivePath: files.configDrive,
      vsockUdsPath: vsock,
      // Unjailed, Firecracker runs as root and opens the volumes where they are.
      volumePaths: (spec.volumes ?? []).map((v) => ({ path: v.file, readOnly: v.readOnly })),
    },
  };
}
