import { statfsSync } from 'node:fs';
import { mkdir, rm } from 'node:fs/promises';
import path from 'node:path';
import type { Logger } from 'pino';
import { setTimeout as sleep } from 'node:timers/promises';
import { OrchestratorError } from '../errors.js';
import { run } from '../util/exec.js';
import type { VolumeSettings } from './settings.js';
import { allocatedBytes, guestWrittenMark, makeVolumeFile, volumeFile } from './volume-files.js';
import { VolumeHolds, type HeldVolumes } from './volume-holds.js';
import { checkVolumeName, checkVolumeQuota, checkVolumeSize, VOLUME_NAME_PATTERN, type VolumeMount } from './volume-names.js';
import type { VolumeRecord, VolumeStore } from './volume-store.js';

export type { VolumeMount } from './volume-names.js';
export type { HeldVolumes } from './volume-holds.js';

/** A volume as the API shows it. */
export interface VolumeView {
  name: string;
  sizeMiB: number;
  /** The bytes of host disk its file holds now (at most sizeMiB MiB). */
  usedBytes: number;
  createdAt: string;
  /** The sessions that have it mounted now, and how. */
  mountedBy: Array<{ sessionId: string; readOnly: boolean }>;
}

/** A mount with the file that holds its data, for the runtime. */
export interface VolumeAttachment extends VolumeMount {
  file: string;
}

/** Held volumes of a session, with their files. */
export interface SessionVolumes extends HeldVolumes {
  readonly attachments: readonly VolumeAttachment[];
}

export interface VolumesOptions {
  store: VolumeStore;
  /** <stateDir>/volumes. */
  dir: string;
  settings: VolumeSettings;
  log: Logger;
}

/**
 * Volumes (docs/volumes.md): per tenant, named, of a fixed size; their data outlives the
 * sessions that mount them. Another tenant's volume is not found, never listed nor mounted.
 * The quota is checked and the row inserted in one synchronous step, so racing creates
 * cannot pass it together.
 */
export class Volumes {
  readonly holds = new VolumeHolds();

  constructor(private readonly opts: VolumesOptions) {}

  async create(tenant: string, body: { name?: unknown; sizeMiB?: unknown }): Promise<VolumeView> {
    const { store, settings } = this.opts;
    const name = checkVolumeName(body.name);
    const sizeMiB = checkVolumeSize(body.sizeMiB, settings);
    if (store.get(tenant, name)) throw new OrchestratorError('volume_exists', `volume ${name} exists already`);
    checkVolumeQuota(store.list(tenant), sizeMiB, settings);
    this.checkHostSpace(sizeMiB);
    const record: VolumeRecord = { tenant, name, sizeMiB, createdAt: new Date().toISOString() };
    const unmark = this.holds.mark(tenant, name, 'creating');
    store.insert(record);
    const file = this.file(record);
    try {
      await makeVolumeFile(file, sizeMiB);
    } catch (err) {
      store.delete(tenant, name);
      throw err;
    } finally {
      unmark();
    }
    this.opts.log.info({ tenant, volume: name, sizeMiB }, 'volume created');
    return this.view(record);
  }

  list(tenant: string): VolumeView[] {
    return this.opts.store.list(tenant).map((r) => this.view(r));
  }

  get(tenant: string, name: string): VolumeView {
    return this.view(this.record(tenant, name));
  }

  /** Deletes a volume and its data; a 409 volume_in_use while a session has it mounted. */
  async delete(tenant: string, name: string): Promise<VolumeView> {
    const record = this.record(tenant, name);
    const view = this.view(record);
    const unmark = this.holds.mark(tenant, name, 'deleting');
    try {
      await rm(this.file(record), { force: true });
      await rm(guestWrittenMark(this.file(record)), { force: true });
      this.opts.store.delete(tenant, name);
    } finally {
      unmark();
    }
    this.opts.log.info({ tenant, volume: name }, 'volume deleted');
    return { ...view, usedBytes: 0, mountedBy: [] };
  }

  /**
   * Takes a session's volumes (checked mounts, volume-names.ts): each must be the tenant's
   * (404 volume_not_found) and free for its use (409 volume_in_use). All or none, at once.
   */
  take(tenant: string, sessionId: string, mounts: readonly VolumeMount[]): SessionVolumes {
    const attachments = mounts.map((m) => ({ ...m, file: this.file(this.record(tenant, m.name)) }));
    return { ...this.holds.take(tenant, sessionId, mounts), attachments };
  }

  /** A session adopted after a restart keeps what it has mounted (unchecked: it is mounted already). */
  hold(tenant: string, sessionId: string, mounts: readonly VolumeMount[]): SessionVolumes {
    const attachments = mounts.map((m) => ({ ...m, file: volumeFile(this.opts.dir, tenant, m.name) }));
    return { ...this.holds.hold(tenant, sessionId, mounts), attachments };
  }

  /**
   * Gives a session's volumes back once its sandbox is released. After a release that failed
   * (`unmounted` false), a volume whose file is still on a loop device stays held, so no
   * second writer can mount a file system still mounted; a restart's reclaim frees it. (A
   * file that other readers still hold may share their loop device: it is not asked about.)
   */
  async release(volumes: SessionVolumes, unmounted: boolean): Promise<void> {
    for (const { file, name } of unmounted ? [] : volumes.attachments) {
      const others = this.holds.users(volumes.tenant, name).filter((u) => u.sessionId !== volumes.holder);
      if (others.length === 0 && !(await loopDetached(file))) {
        this.opts.log.error({ volume: name, file }, 'a volume is still attached to a loop device after its session: kept held');
        return;
      }
    }
    volumes.release();
  }

  private record(tenant: string, name: string): VolumeRecord {
    const record = VOLUME_NAME_PATTERN.test(name) ? this.opts.store.get(tenant, name) : undefined;
    if (!record) throw new OrchestratorError('volume_not_found', `no volume ${JSON.stringify(name)}`);
    return record;
  }

  private file(record: VolumeRecord): string {
    return volumeFile(this.opts.dir, record.tenant, record.name);
  }

  private view(record: VolumeRecord): VolumeView {
    return {
      name: record.name,
      sizeMiB: record.sizeMiB,
      usedBytes: allocatedBytes(this.file(record)),
      createdAt: record.createdAt,
      mountedBy: this.holds.users(record.tenant, record.name),
    };
  }

  /**
   * Every volume may fill up: the host's free space must cover what the volumes have not
   * used yet plus the new one (a 503 host_disk_low otherwise), so that sparse files cannot
   * promise more than the disk has.
   */
  private checkHostSpace(sizeMiB: number): void {
    const { dir } = this.opts;
    let free: number;
    try {
      const fs = statfsSync(path.dirname(dir));
      free = fs.bavail * fs.bsize;
    } catch {
      return;
    }
    const promised = this.promisedMiB() * 2 ** 20;
    if (free - promised < sizeMiB * 2 ** 20) {
      throw new OrchestratorError(
        'host_disk_low',
        `the host has ${Math.floor(free / 2 ** 20)} MiB free, ${Math.ceil(promised / 2 ** 20)} MiB of it promised to volumes: no room for ${sizeMiB} MiB more`,
      );
    }
  }

  /** What all volumes may still take of the host's disk, MiB: their sizes less what their files hold (session admission counts it too). */
  promisedMiB(): number {
    return this.opts.store.all().reduce((sum, r) => sum + Math.max(0, r.sizeMiB - allocatedBytes(this.file(r)) / 2 ** 20), 0);
  }

  /** Makes <stateDir>/volumes (root's only). */
  async prepare(): Promise<void> {
    await mkdir(this.opts.dir, { recursive: true, mode: 0o700 });
  }
}

/** Whether no loop device is backed by `file` (a loop device's autoclear may lag its unmount by a moment). */
async function loopDetached(file: string, waitMs = 2_000): Promise<boolean> {
  const deadline = Date.now() + waitMs;
  for (;;) {
    const res = await run(['losetup', '-j', file], { allowFailure: true });
    if (res.exitCode === 0 && res.stdout.trim() === '') return true;
    if (Date.now() >= deadline) return false;
    await sleep(50);
  }
}
