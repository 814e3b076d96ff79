import { InvalidRequestError } from '../errors.js';
import type { ForkSource } from '../snapshots/snapshots.js';
import type { CreateSessionOptions } from './session-request.js';

/** Where a create finds the snapshot it names (snapshots/snapshots.ts): the tenant's own, held until the session has started. */
export interface SnapshotSource {
  take(tenant: string, id: unknown): ForkSource;
}

/**
 * A create that names a snapshot (a fork, docs/snapshots.md): the snapshot's template and
 * screen are the session's (its desktop is in the saved state), volumes cannot be given (the
 * saved VM has none), and it boots cold from the snapshot, never from the warm pool.
 */
export function forkRequest(
  source: SnapshotSource | undefined,
  tenant: string,
  options: CreateSessionOptions,
): { options: CreateSessionOptions; from: { id: string; dir: string }; release(): void } | undefined {
  if (options.snapshot === undefined) return undefined;
  if (!source) throw new InvalidRequestError('snapshot: this orchestrator keeps no snapshots');
  if (options.volumes !== undefined && options.volumes.length > 0)
    throw new InvalidRequestError('volumes: a session started from a snapshot cannot mount volumes');
  const taken = source.take(tenant, options.snapshot);
  const { record } = taken;
  for (const [field, asked, saved] of [
    ['template', options.template, record.template],
    ['width', options.width, record.width],
    ['height', options.height, record.height],
  ] as const) {
    if (asked !== undefined && asked !== saved) {
      taken.release();
      throw new InvalidRequestError(`${field}: a session from snapshot ${record.id} has its ${field} (${saved}); leave it out`);
    }
  }
  return {
    options: { ...options, template: record.template, width: record.width, height: record.height },
    from: { id: record.id, dir: taken.dir },
    release: () => taken.release(),
  };
}
