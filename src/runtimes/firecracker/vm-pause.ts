import path from 'node:path';
import type { AdoptedSandbox, PauseMode, PauseResult, PauseTarget, PausingRuntime } from '../runtime.js';
import { FirecrackerClient } from './api/client.js';
import { FirecrackerDiskPause } from './disk-pause.js';
import { pauseStateMaxMiB } from './disk-state.js';
import { jailId } from './jailer/jail-id.js';
import { JAILED_API_SOCKET } from './jailer/jailer-args.js';

/** Where a VM's API socket is: in its jail (`<jails>/<prefix><id>/root/run/...`), or in its session dir unjailed. */
export interface ApiSocketPlace {
  prefix: string;
  /** The jails directory when jailed; undefined when Firecracker runs unjailed. */
  jailsDir(): string | undefined;
}

/**
 * Pause of a Firecracker VM (the API spec of release v1.16.1). Memory: `PATCH /vm {state:
 * "Paused"}` and `{state: "Resumed"}`, and `GET /` (InstanceInfo.state) for a restart's
 * adoption; the vCPUs stop, the guest's memory stays in the VMM. Disk: its snapshot API, the
 * VMM ended and a fresh one loading the snapshot at the resume (disk-pause.ts).
 */
export class FirecrackerPause {
  constructor(
    private readonly place: ApiSocketPlace,
    private readonly disk: FirecrackerDiskPause,
  ) {}

  modes(): readonly PauseMode[] {
    return ['memory', 'disk'];
  }

  /** Both modes are done wherever the runtime runs (jailed or not). */
  unavailable(): string | undefined {
    return undefined;
  }

  async pause(target: PauseTarget, mode: PauseMode): Promise<PauseResult> {
    if (mode === 'disk') return this.disk.pause(target, this.apiSocketOf(target));
    await this.call(target, (api) => api.patchVm({ state: 'Paused' }));
    return { bytes: 0 };
  }

  async resume(target: PauseTarget, mode: PauseMode): Promise<AdoptedSandbox | void> {
    if (mode === 'disk') return this.disk.resume(target);
    await this.call(target, (api) => api.patchVm({ state: 'Resumed' }));
  }

  async isPaused(target: PauseTarget): Promise<boolean> {
    return this.call(target, async (api) => (await api.getInstanceInfo()).state === 'Paused').catch(() => false);
  }

  apiSocketOf(target: PauseTarget): string {
    const jails = this.place.jailsDir();
    if (jails === undefined) return path.join(target.sessionDir, 'firecracker.socket');
    return path.join(jails, jailId(this.place.prefix, target.sessionId), 'root', JAILED_API_SOCKET);
  }

  private async call<T>(target: PauseTarget, work: (api: FirecrackerClient) => Promise<T>): Promise<T> {
    const api = new FirecrackerClient(this.apiSocketOf(target));
    try {
      return await work(api);
    } finally {
      api.close();
    }
  }
}

/** The PausingRuntime methods of a Firecracker runtime (its constructor assigns them to itself). */
export function firecrackerPausing(place: ApiSocketPlace, disk: FirecrackerDiskPause): Required<PausingRuntime> {
  const pausing = new FirecrackerPause(place, disk);
  return {
    pauseModes: () => pausing.modes(),
    pauseUnavailable: () => pausing.unavailable(),
    pauseStateMaxMiB: (memoryMiB) => pauseStateMaxMiB(memoryMiB),
    // The snapshot names its volumes' drives in the jail, where they stay linked while paused.
    diskPauseWithVolumes: () => true,
    pause: (target, mode) => pausing.pause(target, mode),
    resume: (target, mode) => pausing.resume(target, mode),
    isPaused: (target) => pausing.isPaused(target),
    adoptPaused: (sessionId, sessionDir) => disk.adoptPaused(sessionId, sessionDir),
  };
}
