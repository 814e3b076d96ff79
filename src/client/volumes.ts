import type { CreateVolumeOptions, VolumeInfo } from './api-types.js';
import type { SandboxClient } from './index.js';

export type { CreateVolumeOptions, VolumeInfo } from './api-types.js';

/**
 * The tenant's volumes (POST /v1/volumes; docs/volumes.md): disks that outlive sessions,
 * mounted at create with `volumes: [{ name, path, readOnly? }]`.
 */
export class Volumes {
  constructor(private readonly client: SandboxClient) {}

  /** Makes an empty volume of `sizeMiB` (409 volume_exists, 413 volume_quota_exceeded). */
  create(options: CreateVolumeOptions): Promise<VolumeInfo> {
    return this.client.json<VolumeInfo>('POST', '/v1/volumes', options);
  }

  async list(): Promise<VolumeInfo[]> {
    return (await this.client.json<{ volumes: VolumeInfo[] }>('GET', '/v1/volumes')).volumes;
  }

  get(name: string): Promise<VolumeInfo> {
    return this.client.json<VolumeInfo>('GET', `/v1/volumes/${encodeURIComponent(name)}`);
  }

  /** Deletes it and its data (409 volume_in_use while a session has it mounted). */
  delete(name: string): Promise<VolumeInfo> {
    return this.client.json<VolumeInfo>('DELETE', `/v1/volumes/${encodeURIComponent(name)}`);
  }
}
