import path from 'node:path';
import type { PauseMode, PauseResult, PauseTarget, PausingRuntime } from '../runtime.js';
import { FirecrackerClient } from './api/client.js';
import { jailId } from './jailer/jail-id.js';
import { JAILED_API_SOCKET } from './jailer/jailer-args.js';

/** Where a VM's API socket is: in its jail (`<jails>/<prefix><id>/root/run/...`), or in its session dir unjailed. */
export interface ApiSocketPlace {
  prefix: string;
  /** The jails directory when jailed; undefined when Firecracker runs unjailed. */
  jailsDir(): string | undefined;
}

/**
 * Memory pause of a Firecracker VM: `PATCH /vm {state: "Paused"}` and `{state: "Resumed"}`
 * (the API spec of release v1.16.1), and `GET /` (InstanceInfo.state) for a restart's
 * adoption. The vCPUs stop; the guest's memory stays in the VMM. Disk (snapshot create and
 * load) is not wired up for pause yet.
 */
export class FirecrackerPause {
  constructor(private readonly place: ApiSocketPlace) {}

  modes(): readonly PauseMode[] {
    return ['memory'];
  }

  unavailable(mode: PauseMode): string | undefined {
    return mode === 'disk' ? 'Firecracker pause to disk (snapshot create and load) is not wired up yet' : undefined;
  }

  async pause(target: PauseTarget, mode: PauseMode): Promise<PauseResult> {
    const why = this.unavailable(mode);
    if (why) throw new Error(why);
    await this.call(target, (api) => api.patchVm({ state: 'Paused' }));
    return { bytes: 0 };
  }

  async resume(target: PauseTarget): Promise<void> {
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
export function firecrackerPausing(place: ApiSocketPlace): Omit<Required<PausingRuntime>, 'adoptPaused' | 'pauseStateMaxMiB'> {
  const pausing = new FirecrackerPause(place);
  return {
    pauseModes: () => pausing.modes(),
    pauseUnavailable: (mode) => pausing.unavailable(mode),
    pause: (target, mode) => pausing.pause(target, mode),
    resume: (target) => pausing.resume(target),
    isPaused: (target) => pausing.isPaused(target),
  };
}
