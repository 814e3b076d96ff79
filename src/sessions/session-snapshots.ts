import { OrchestratorError, NotFoundError, SessionStateError } from '../errors.js';
import type { Runtime } from '../runtimes/runtime.js';
import type { SnapshotSessions } from '../snapshots/snapshots.js';
import type { SandboxHost } from './sandbox-host.js';
import type { SessionRegistry } from './registry.js';

/**
 * What a snapshot asks of the sessions (snapshots/snapshots.ts): which session, and the
 * runtime's save of its sandbox while nothing else changes it. A snapshot counts as an action
 * in flight: a pause waits for it (409 session_busy), the idle timeout does not run out under
 * it, and a second snapshot of the same session is refused until the first is done.
 */
export class SessionSnapshots implements SnapshotSessions {
  constructor(
    private readonly registry: SessionRegistry,
    private readonly runtime: Runtime,
    private readonly host: Pick<SandboxHost, 'snapshot'>,
  ) {}

  unavailable(): string | undefined {
    const { runtime } = this;
    const why = runtime.snapshotUnavailable?.();
    if (why !== undefined) return why;
    if (!runtime.snapshot)
      return `the ${runtime.name} runtime cannot snapshot its sandboxes yet (the qemu runtime, SBX_RUNTIME=qemu, snapshots and forks them)`;
    return undefined;
  }

  describe(tenant: string, sessionId: string): { template: string; runtime: string; width: number; height: number } {
    const found = this.registry.find(sessionId);
    if (found && found.record.tenant !== tenant) throw new NotFoundError(`session ${sessionId} does not exist`);
    const session = this.registry.ready(sessionId); // 404 / 409 / 410 for every other state
    const { record } = session;
    if (record.tenant !== tenant) throw new NotFoundError(`session ${sessionId} does not exist`);
    if (record.volumes.length > 0) {
      throw new OrchestratorError(
        'snapshot_unsupported',
        `session ${sessionId} has volumes mounted: their data is not part of a snapshot, so it cannot be snapshotted`,
      );
    }
    if (session.snapshotting) throw new SessionStateError(`session ${sessionId} is being snapshotted already`);
    return { template: record.template, runtime: record.runtime, width: record.width, height: record.height };
  }

  async snapshot(sessionId: string, dir: string): Promise<void> {
    const session = this.registry.ready(sessionId);
    if (session.snapshotting) throw new SessionStateError(`session ${sessionId} is being snapshotted already`);
    session.snapshotting = true;
    session.inFlight++;
    // The VM stops for the migration's last pass and the disk's copy: keepalives wait, as in a pause.
    const keepalives = session.connection?.holdKeepalives();
    try {
      if (!this.host.snapshot) throw new Error('this host cannot snapshot sandboxes');
      await this.host.snapshot(session, dir);
    } finally {
      keepalives?.();
      session.inFlight--;
      session.snapshotting = false;
    }
  }
}
