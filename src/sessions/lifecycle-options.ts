import type { Logger } from 'pino';
import type { Metrics } from '../metrics/metrics.js';
import type { GuestImage } from '../guest/image/image-store.js';
import type { AddressLease } from '../network/address-pool.js';
import type { RuntimeName } from '../runtimes/runtime.js';
import type { CapacityGate, CapacitySlot } from './capacity.js';
import type { SessionRegistry } from './registry.js';
import type { SandboxHost } from './sandbox-host.js';
import type { RequestDefaults, SessionOwner, SessionRequest } from './session-request.js';
import type { TenantLimits } from './tenant-limits.js';
import type { SessionStore } from './store.js';
import type { SessionTemplate, TemplateSource } from './templates.js';
import type { VolumeSource } from './session-volumes.js';
import type { SnapshotSource } from './session-fork.js';
import type { RuntimeCapabilities } from '../runtimes/runtime.js';
import type { SessionVolumes } from '../volumes/volumes.js';
import type { StepTimes } from '../util/step-times.js';

/** What the session lifecycle (lifecycle.ts) is built from. */

/** The /30 blocks sandboxes are addressed from (network/address-allocator.ts). */
export interface AddressSource {
  leaseFree(): Promise<AddressLease>;
  release(index: number): void;
}

export interface LifecycleOptions {
  registry: SessionRegistry;
  store: SessionStore;
  host: SandboxHost;
  addresses: AddressSource;
  capacity: CapacityGate;
  metrics: Metrics;
  log: Logger;
  runtimeName: RuntimeName;
  defaults: RequestDefaults;
  /** Tenants whose sessions get other limits and defaults (tenant-limits.ts); absent: `defaults` for all. */
  limits?: TenantLimits;
  templates: TemplateSource;
  /** What a session's disk is (admission promises it: capacity.ts); absent: no disk demand. */
  disk?: SessionDisk;
  /** Volumes (docs/volumes.md); absent: none can be mounted. */
  volumes?: VolumeSource;
  /** Snapshots a create may start from (docs/snapshots.md); absent: none. */
  snapshots?: SnapshotSource;
  /** Whether the runtime mounts volumes (RuntimeCapabilities.volumes). */
  runtimeVolumes?: RuntimeCapabilities['volumes'];
}

/** A session's disk as admission sees it. */
export interface SessionDisk {
  /** The most a sandbox of `image` may write on the host, MiB (Runtime.writableDiskMiB; an adopted session's image may be unknown). */
  writableMiB(image: GuestImage | undefined): number;
  /** What a session's own files hold on the host now, MiB (disk-capacity.ts, sessionFilesMiB). */
  usedMiB(sessionId: string): number;
}

/** One create, as it goes from admission to a cold boot or a warm claim. */
export interface CreateAttempt {
  request: SessionRequest;
  template: SessionTemplate;
  owner: SessionOwner;
  slot: CapacitySlot;
  /** performance.now() when the create began. */
  started: number;
  /** The volumes taken for it, until its session owns them. */
  volumes: { held?: SessionVolumes };
  steps: StepTimes;
  /** A fork's snapshot (session-fork.ts). */
  fork?: { id: string; dir: string };
}
