import { OrchestratorError } from '../errors.js';
import type { VolumeMount } from './volume-names.js';

/** Who has a volume now: one writer, or any number of readers; or the volume itself while it is made or deleted. */
interface Hold {
  writer?: string;
  readers: Set<string>;
  /** Being made (its file is not whole yet) or deleted: nobody may mount it. */
  busy?: 'creating' | 'deleting';
}

/** What a session holds; released once, after its mounts are gone. */
export interface HeldVolumes {
  readonly tenant: string;
  /** The session that holds them. */
  readonly holder: string;
  readonly mounts: readonly VolumeMount[];
  release(): void;
}

/**
 * The one-writer rule, in memory: each check and its take happen in one synchronous step (no
 * await between them), so two creates racing for a volume cannot both get it. Kept in memory
 * only: after a restart, the sessions adopted take theirs again (`hold`) and the volumes of
 * sessions that are gone are free (their mounts were reclaimed with their session dirs).
 */
export class VolumeHolds {
  private readonly holds = new Map<string, Hold>();

  /** Takes every mount for `holder`, or none (a 409 volume_in_use naming the first in use). */
  take(tenant: string, holder: string, mounts: readonly VolumeMount[]): HeldVolumes {
    for (const m of mounts) {
      const hold = this.holds.get(key(tenant, m.name));
      if (!hold) continue;
      if (hold.busy) throw new OrchestratorError('volume_in_use', `volume ${m.name} is being ${hold.busy === 'creating' ? 'created' : 'deleted'}`);
      if (hold.writer) throw new OrchestratorError('volume_in_use', `volume ${m.name} is mounted writable by session ${hold.writer}: one writer at a time`);
      if (!m.readOnly && hold.readers.size > 0) {
        throw new OrchestratorError('volume_in_use', `volume ${m.name} is mounted read-only by ${hold.readers.size} session(s): a writer needs it alone`);
      }
    }
    return this.hold(tenant, holder, mounts);
  }

  /** Takes the mounts without checking: a session adopted after a restart has them mounted already. */
  hold(tenant: string, holder: string, mounts: readonly VolumeMount[]): HeldVolumes {
    for (const m of mounts) {
      const k = key(tenant, m.name);
      const hold = this.holds.get(k) ?? { readers: new Set<string>() };
      if (m.readOnly) hold.readers.add(holder);
      else hold.writer = holder;
      this.holds.set(k, hold);
    }
    let released = false;
    return {
      tenant,
      holder,
      mounts,
      release: () => {
        if (released) return;
        released = true;
        for (const m of mounts) {
          const k = key(tenant, m.name);
          const hold = this.holds.get(k);
          if (!hold) continue;
          if (hold.writer === holder) hold.writer = undefined;
          hold.readers.delete(holder);
          if (!hold.writer && hold.readers.size === 0 && !hold.busy) this.holds.delete(k);
        }
      },
    };
  }

  /** Marks a free volume busy (made or deleted); a 409 if anyone holds it. Returns the release of the mark. */
  mark(tenant: string, name: string, busy: 'creating' | 'deleting'): () => void {
    const k = key(tenant, name);
    const hold = this.holds.get(k);
    if (hold?.busy) throw new OrchestratorError('volume_in_use', `volume ${name} is being ${hold.busy === 'creating' ? 'created' : 'deleted'}`);
    if (hold) {
      const users = [...(hold.writer ? [hold.writer] : []), ...hold.readers];
      throw new OrchestratorError('volume_in_use', `volume ${name} is mounted by session(s) ${users.join(', ')}`);
    }
    this.holds.set(k, { readers: new Set(), busy });
    return () => {
      if (this.holds.get(k)?.busy === busy) this.holds.delete(k);
    };
  }

  /** The sessions that have a volume mounted, and how. */
  users(tenant: string, name: string): Array<{ sessionId: string; readOnly: boolean }> {
    const hold = this.holds.get(key(tenant, name));
    if (!hold) return [];
    return [...(hold.writer ? [{ sessionId: hold.writer, readOnly: false }] : []), ...[...hold.readers].map((sessionId) => ({ sessionId, readOnly: true }))];
  }
}

function key(tenant: string, name: string): string {
  return `${tenant}\u0000${name}`;
}
