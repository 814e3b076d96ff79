import type { SessionAccess } from '../tools/session-access.js';
import type { ProcessLimits } from './limits.js';
import { ProcessTable } from './process-table.js';

/** A session's process table, made on first use and closed (every process killed) when the session ends. */
export function sessionProcesses(sessions: SessionAccess, id: string, display: number, limits: ProcessLimits): Promise<ProcessTable> {
  return sessions.attachment(id, 'processes', async ({ connection, cleanup }) => {
    const table = new ProcessTable(connection, display, limits);
    await cleanup.push('processes', () => table.close());
    return table;
  });
}
