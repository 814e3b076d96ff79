import type { ResourceNames } from '../../../network/names.js';
import type { ConsolePipe } from '../../console-pipe.js';
import type { CgroupVersion, VmLimits } from '../../vm/cgroups.js';
import { killOrphan, spawnLogged, type VmProcess } from '../../vm/vm-process.js';
import { jailerArgv, vmmPidFile } from '../jailer/jailer-args.js';
import { findFirecrackerProcesses } from './vmm-process.js';
import { vmmOfPidNamespace } from './pid-ns-vmm.js';

/** The VMM's own threads (API, VMM, vCPUs, block and net I/O): the jail's pids limit. */
const VMM_PIDS_MAX = 64;

export interface JailedLaunch {
  names: ResourceNames;
  jailerBin: string;
  firecrackerBin: string;
  chrootBaseDir: string;
  cgroupVersion: CgroupVersion;
  parentCgroup: string;
  /** The jail's id (jail-id.ts) and the session it is of. */
  id: string;
  sessionId: string;
  /** `<jail>/root`: where the jailer writes Firecracker's pid. */
  rootDir: string;
  user: { uid: number; gid: number };
  netns: string;
  limits: Omit<VmLimits, 'pidsMax'>;
  consolePipe: ConsolePipe;
  apiTimeoutMs: number;
}

/**
 * Runs the jailer on a chroot already laid out, and returns the Firecracker process it hands
 * over: a cold boot, a clone's restore, and a resume from disk (disk-pause.ts) all start
 * their VMM here, so they are jailed alike.
 */
export async function launchJailer(launch: JailedLaunch): Promise<VmProcess> {
  const [jailer, ...args] = jailerArgv({
    jailerBin: launch.jailerBin,
    firecrackerBin: launch.firecrackerBin,
    id: launch.id,
    uid: launch.user.uid,
    gid: launch.user.gid,
    chrootBaseDir: launch.chrootBaseDir,
    netnsName: launch.netns,
    cgroupVersion: launch.cgroupVersion,
    parentCgroup: launch.parentCgroup,
    limits: { ...launch.limits, pidsMax: VMM_PIDS_MAX },
  });
  const jailerProcess = spawnLogged(jailer as string, args, launch.consolePipe, 'jailer');
  try {
    return await vmmOfPidNamespace(jailerProcess, vmmPidFile(launch.rootDir, launch.firecrackerBin), launch.apiTimeoutMs);
  } catch (err) {
    // A Firecracker the jailer started but did not hand over is nobody's: found by its --id.
    for (const orphan of await findFirecrackerProcesses(launch.names)) {
      if (orphan.sessionId === launch.sessionId) await killOrphan(orphan, 'firecracker');
    }
    throw err;
  }
}
