import type { Logger } from 'pino';
import { removeTreeOnOneMount, StillMountedError } from '../host/remove-tree.js';

/** Counts a session directory left on disk (the metric sandbox_session_dirs_kept_total). */
export type CountKeptDir = () => void;

/**
 * Removes a session directory (keys, config, console log, the sandbox's disk file and the
 * mount points of its views) once nothing is mounted in it. If something still is (a view
 * held busy), its mount points are left (the rest, keys included, goes), the directory is
 * logged at error and counted, and the error is thrown on, so that the ledger keeps the
 * session's record and the next start tries again.
 */
export async function removeSessionDir(sessionDir: string, log: Logger, countKept?: CountKeptDir): Promise<void> {
  try {
    await removeTreeOnOneMount(sessionDir);
  } catch (err) {
    if (err instanceof StillMountedError) {
      countKept?.();
      log.error({ dir: sessionDir, mounts: err.mounts }, `a session directory was left on disk, not removed through a mount: ${err.message}`);
    }
    throw err;
  }
}
