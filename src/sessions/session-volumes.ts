import { OrchestratorError } from '../errors.js';
import type { RuntimeCapabilities, RuntimeName } from '../runtimes/runtime.js';
import type { SessionVolumes, VolumeMount } from '../volumes/volumes.js';
import { newSessionId } from './session.js';
import type { Session } from './session.js';
import type { SessionOwner } from './session-request.js';

/** Where sessions take their volumes (volumes/volumes.ts). */
export interface VolumeSource {
  /** All or none, checked and taken in one synchronous step: 404 volume_not_found, 409 volume_in_use. */
  take(tenant: string, sessionId: string, mounts: readonly VolumeMount[]): SessionVolumes;
  /** An adopted session's, unchecked (mounted already). */
  hold(tenant: string, sessionId: string, mounts: readonly VolumeMount[]): SessionVolumes;
  /** Given back after the session's release; after one that failed (`unmounted` false), a volume still attached stays held. */
  release(volumes: SessionVolumes, unmounted: boolean): Promise<void>;
}

/**
 * A create's volumes, taken before anything else is: a 404/409 here has taken nothing. Their
 * holds name the session, so a session with volumes gets its id now, and it boots cold (a
 * pooled sandbox has none mounted): the owner returned says so. `held` is the caller's to
 * give back until the session owns it.
 */
export function takeVolumes(
  source: VolumeSource | undefined,
  runtime: { name: RuntimeName; volumes: RuntimeCapabilities['volumes'] },
  owner: SessionOwner,
  mounts: readonly VolumeMount[],
): { owner: SessionOwner; held?: SessionVolumes } {
  if (mounts.length === 0) return { owner };
  if (runtime.volumes !== true || !source) {
    const why = typeof runtime.volumes === 'string' ? runtime.volumes : 'its guests mount no volume drive yet (docs/volumes.md)';
    throw new OrchestratorError('volumes_unavailable', `volumes: the ${runtime.name} runtime cannot mount volumes here: ${why}`);
  }
  const sessionId = owner.sessionId ?? newSessionId();
  return { owner: { ...owner, sessionId, pooledIdAccepted: false }, held: source.take(owner.tenant, sessionId, mounts) };
}

/** How long a guest is given to write its volumes' data out before its sandbox is stopped. */
const FLUSH_TIMEOUT_MS = 10_000;

/**
 * Before a sandbox with writable volumes is stopped: `sync` in the guest, so that what its
 * kernel still holds in memory reaches the volume's disk (a VM is stopped, not shut down; a
 * container's writes are the host kernel's already, and cost nothing here). Best effort: a
 * guest that cannot answer has sandbox-init's syncfs every second behind it. Paused to disk,
 * its guest does not run (it was flushed before the pause, pause.ts): not asked.
 */
export async function flushGuestVolumes(session: Session, warn: (err: unknown) => void): Promise<void> {
  const connection = session.connection;
  if (!session.volumes?.attachments.some((v) => !v.readOnly) || !connection?.isConnected) return;
  if (session.record.paused?.mode === 'disk') return;
  await connection.exec('sync', { timeoutMs: FLUSH_TIMEOUT_MS }).catch(warn);
}
