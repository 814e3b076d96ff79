/**
 * A node's row as SQL reads it and as the store hands it out (NodeRecord). `healthy` is
 * computed by PostgreSQL against its own clock (state 'up' and a heartbeat within
 * `staleMs`), so gateways whose clocks disagree still agree on which nodes are fresh.
 */
import type { RuntimeName } from '../../runtimes/runtime.js';
import type { NodeRecord, NodeReport, NodeState } from './cluster-store.js';

const COLUMNS = [
  'name',
  'url',
  'state',
  'runtimes',
  'templates',
  'warm',
  'max_sessions',
  'memory_mib',
  'vcpus',
  'session_memory_mib',
  'session_vcpus',
  'draining',
  'version',
  'last_heartbeat',
  'registered_at',
  'change_seq',
  'sessions',
  'committed_memory_mib',
  'committed_vcpus',
];

/**
 * The columns of NodeRow; `$<staleParam>` must be bound to staleMs, the age (ms) past which
 * a heartbeat is not fresh. `table` qualifies them (in a statement joining another relation).
 */
export function nodeColumns(staleParam: number, table?: string): string {
  const q = table === undefined ? '' : `${table}.`;
  return `${COLUMNS.map((column) => `${q}${column}`).join(', ')},
    (${q}state = 'up' AND ${q}last_heartbeat > now() - ($${staleParam}::double precision * interval '1 millisecond')) AS healthy`;
}

export interface NodeRow {
  name: string;
  url: string;
  state: NodeState;
  runtimes: string[];
  templates: string[];
  warm: Record<string, number>;
  max_sessions: number;
  memory_mib: number;
  /** numeric: pg hands it over as a string. */
  vcpus: string;
  session_memory_mib: number;
  session_vcpus: string;
  draining: boolean;
  version: string;
  last_heartbeat: Date;
  registered_at: Date;
  /** bigint: a string. */
  change_seq: string;
  sessions: number;
  committed_memory_mib: number;
  committed_vcpus: string;
  healthy: boolean;
}

export function nodeRecordOf(row: NodeRow): NodeRecord {
  return {
    name: row.name,
    url: row.url,
    state: row.state,
    runtimes: row.runtimes as RuntimeName[],
    templates: row.templates,
    warm: row.warm,
    capacity: {
      maxSessions: row.max_sessions,
      sessions: row.sessions,
      memoryMiB: { total: row.memory_mib, committed: row.committed_memory_mib },
      vcpus: { total: Number(row.vcpus), committed: Number(row.committed_vcpus) },
    },
    draining: row.draining,
    healthy: row.healthy,
    lastHeartbeat: row.last_heartbeat,
    registeredAt: row.registered_at,
    version: row.version,
    sessionMemoryMiB: row.session_memory_mib,
    sessionVcpus: Number(row.session_vcpus),
  };
}

/**
 * The report's values in the order of the nodes' report columns (url, runtimes, templates,
 * warm, max_sessions, memory_mib, vcpus, session_memory_mib, session_vcpus, version), checked
 * first: a node sending nonsense is refused here rather than by a CHECK constraint's error.
 */
export function reportValues(report: NodeReport): unknown[] {
  const counts: Array<[string, number]> = [
    ['maxSessions', report.maxSessions],
    ['memoryMiB', report.memoryMiB],
    ['vcpus', report.vcpus],
    ['sessionMemoryMiB', report.sessionMemoryMiB],
    ['sessionVcpus', report.sessionVcpus],
  ];
  for (const [field, value] of counts) {
    if (!Number.isFinite(value) || value < 0) throw new RangeError(`node report: ${field} must be a number >= 0, got ${value}`);
  }
  for (const [template, count] of Object.entries(report.warm)) {
    if (!Number.isInteger(count) || count < 0) throw new RangeError(`node report: warm['${template}'] must be an integer >= 0, got ${count}`);
  }
  return [
    report.url,
    [...report.runtimes],
    [...report.templates],
    JSON.stringify(report.warm),
    Math.floor(report.maxSessions),
    Math.floor(report.memoryMiB),
    report.vcpus,
    Math.floor(report.sessionMemoryMiB),
    report.sessionVcpus,
    report.version,
  ];
}

/** The report columns, in reportValues()'s order. */
export const REPORT_COLUMNS = [
  'url',
  'runtimes',
  'templates',
  'warm',
  'max_sessions',
  'memory_mib',
  'vcpus',
  'session_memory_mib',
  'session_vcpus',
  'version',
] as const;
/** Casts for the parameters bound to REPORT_COLUMNS, in the same order. */
export const REPORT_CASTS = ['text', 'text[]', 'text[]', 'jsonb', 'integer', 'integer', 'numeric', 'integer', 'numeric', 'text'] as const;
