/**
 * The node registry: registration, heartbeats, loss, draining. A node is known by its name;
 * `instance` (random per start of the node process) tells two processes claiming one name
 * apart. Lock order, everywhere in the store: a node's row before any of its sessions' rows
 * (placement, release, end and loss all follow it), so no two transactions deadlock.
 */
import { NodeNameTakenError, type HeartbeatAnswer, type NodeRecord, type NodeRemoval, type NodeReport } from './cluster-store.js';
import type { Db } from './db.js';
import { nodeColumns, nodeRecordOf, REPORT_CASTS, REPORT_COLUMNS, reportValues, type NodeRow } from './node-rows.js';

/** `$<offset+1>`... `$<offset+10>` cast to the report columns' types. */
function reportParams(offset: number): string[] {
  return REPORT_CASTS.map((cast, i) => `$${offset + i + 1}::${cast}`);
}

export class NodeRegistry {
  constructor(
    private readonly db: Db,
    /** A heartbeat older than this is not fresh: the node is not placed on, and its name may be taken over. */
    private readonly staleMs: number,
  ) {}

  /**
   * Registers `name` for `instance`. Refused (NodeNameTakenError) while another instance
   * holds the name and heartbeats; a stale or lost holder is replaced. The node's commitment
   * is recounted from the directory here, under its row's lock (placement cannot add to it
   * meanwhile), so a restart starts from the directory's truth.
   */
  async register(name: string, instance: string, report: NodeReport): Promise<void> {
    const values = reportValues(report);
    await this.db.transaction('registering a node', async (client) => {
      for (let attempt = 0; attempt < 2; attempt++) {
        const held = await client.query<{ instance: string; state: string; stale: boolean; last_heartbeat: Date }>(
          `SELECT instance, state, last_heartbeat,
             last_heartbeat <= now() - ($2::double precision * interval '1 millisecond') AS stale
           FROM nodes WHERE name = $1 FOR UPDATE`,
          [name, this.staleMs],
        );
        const row = held.rows[0];
        if (!row) {
          const inserted = await client.query(
            `INSERT INTO nodes (name, instance, state, ${REPORT_COLUMNS.join(', ')}, last_heartbeat, registered_at)
             VALUES ($1, $2, 'up', ${reportParams(2).join(', ')}, now(), now())
             ON CONFLICT (name) DO NOTHING`,
            [name, instance, ...values],
          );
          if (inserted.rowCount === 1) return;
          continue; // another process inserted it meanwhile: judge its claim like any other
        }
        if (row.instance !== instance && row.state === 'up' && !row.stale) {
          throw new NodeNameTakenError(
            `node name '${name}' is held by another running instance (last heartbeat ${row.last_heartbeat.toISOString()}); ` + `stop it or choose another name`,
          );
        }
        await client.query(
          `UPDATE nodes SET instance = $2, state = 'up', lost_at = NULL, last_heartbeat = now(), registered_at = now(),
             ${REPORT_COLUMNS.map((column, i) => `${column} = ${reportParams(2)[i]}`).join(', ')},
             change_seq = nextval('nodes_change_seq'),
             sessions = c.sessions, committed_memory_mib = c.memory_mib, committed_vcpus = c.vcpus
           FROM (SELECT count(*)::integer AS sessions, coalesce(sum(memory_mib), 0)::integer AS memory_mib,
                        coalesce(sum(vcpus), 0) AS vcpus
                 FROM sessions WHERE node = $1 AND state IN ('creating', 'live')) AS c
           WHERE name = $1`,
          [name, instance, ...values],
        );
        return;
      }
      throw new NodeNameTakenError(`node name '${name}' was registered by another instance at the same moment`);
    });
  }

  /**
   * The node is alive and says what it offers now. 'replaced' when another instance took
   * the name, 'lost' when it was marked lost (or forgotten): either way the node must stop
   * serving as this name (and register again, which reconciles its sessions).
   */
  async heartbeat(name: string, instance: string, report: NodeReport): Promise<HeartbeatAnswer> {
    const values = reportValues(report);
    const params = reportParams(2);
    const updated = await this.db.query(
      'heartbeat',
      `UPDATE nodes SET last_heartbeat = now(),
         change_seq = CASE WHEN (${REPORT_COLUMNS.join(', ')}) IS DISTINCT FROM (${params.join(', ')})
           OR last_heartbeat <= now() - ($${params.length + 3}::double precision * interval '1 millisecond')
           THEN nextval('nodes_change_seq') ELSE change_seq END,
         ${REPORT_COLUMNS.map((column, i) => `${column} = ${params[i]}`).join(', ')}
       WHERE name = $1 AND instance = $2 AND state = 'up'`,
      // A heartbeat ending a silence of half the staleness is a change too: gateways' cached
      // views see the node healthy again at once, not at their next full read.
      [name, instance, ...values, this.staleMs / 2],
    );
    if (updated.rowCount === 1) return 'ok';
    const row = (await this.db.query<{ instance: string; state: string }>('heartbeat', 'SELECT instance, state FROM nodes WHERE name = $1', [name])).rows[0];
    if (row && row.instance !== instance) return 'replaced';
    return 'lost';
  }

  /**
   * Nodes whose last heartbeat is older than `staleMs` (at `now`, PostgreSQL's clock by
   * default) become lost, and their creating and live sessions lost with a reason naming
   * the node and when it was last heard from. Rows another gateway is marking (or a node is
   * heartbeating) right now are skipped, not waited for: several gateways sweep at once,
   * each takes what is free, and the next sweep takes the rest. Returns the names marked.
   */
  async markLost(staleMs: number, now?: Date): Promise<string[]> {
    return this.db.transaction('marking lost nodes', async (client) => {
      const candidates = await client.query<{ name: string }>(
        `SELECT name FROM nodes
         WHERE state = 'up' AND last_heartbeat < coalesce($1::timestamptz, now()) - ($2::double precision * interval '1 millisecond')
         ORDER BY name FOR UPDATE SKIP LOCKED`,
        [now ?? null, staleMs],
      );
      if (candidates.rows.length === 0) return [];
      const lost = await client.query<{ name: string; last_heartbeat: Date }>(
        `UPDATE nodes SET state = 'lost', lost_at = now(), sessions = 0, committed_memory_mib = 0, committed_vcpus = 0,
           change_seq = nextval('nodes_change_seq')
         WHERE name = ANY($1::text[]) RETURNING name, last_heartbeat`,
        [candidates.rows.map((row) => row.name)],
      );
      // A statement of its own (a fresh snapshot): every session placed on these nodes before
      // their rows were locked is visible to it, and none can be placed while they are.
      await client.query(
        `UPDATE sessions s SET state = 'lost', ended_at = now(), reason = r.reason
         FROM unnest($1::text[], $2::text[]) AS r(node, reason)
         WHERE s.node = r.node AND s.state IN ('creating', 'live')`,
        [lost.rows.map((row) => row.name), lost.rows.map((row) => lostReason(row.name, row.last_heartbeat))],
      );
      return lost.rows.map((row) => row.name).sort();
    });
  }

  async list(): Promise<NodeRecord[]> {
    const result = await this.db.query<NodeRow>('listing nodes', `SELECT ${nodeColumns(1)} FROM nodes ORDER BY name`, [this.staleMs]);
    return result.rows.map(nodeRecordOf);
  }

  async get(name: string): Promise<NodeRecord | undefined> {
    const result = await this.db.query<NodeRow>('reading a node', `SELECT ${nodeColumns(1)} FROM nodes WHERE name = $2`, [this.staleMs, name]);
    const row = result.rows[0];
    return row && nodeRecordOf(row);
  }

  /**
   * Forgets a lost node: routes, sessions and volumes naming it, then its row, in one
   * transaction under its row's lock (a node that registers again meanwhile waits, then finds
   * no row and registers as new). A gateway's cached view drops the row at its next full read;
   * until then the node is lost in it, so nothing is placed on it.
   */
  async remove(name: string): Promise<NodeRemoval> {
    return this.db.transaction('removing a node', async (client) => {
      const held = await client.query<{ state: string }>('SELECT state FROM nodes WHERE name = $1 FOR UPDATE', [name]);
      const row = held.rows[0];
      if (!row) return { removed: false, why: 'missing' };
      if (row.state !== 'lost') return { removed: false, why: 'not_lost' };
      await client.query('DELETE FROM view_routes WHERE session_id IN (SELECT id FROM sessions WHERE node = $1)', [name]);
      await client.query('DELETE FROM run_routes WHERE session_id IN (SELECT id FROM sessions WHERE node = $1)', [name]);
      const sessions = await client.query('DELETE FROM sessions WHERE node = $1', [name]);
      const volumes = await client.query('DELETE FROM volumes WHERE node = $1', [name]);
      await client.query('DELETE FROM nodes WHERE name = $1', [name]);
      return { removed: true, sessions: sessions.rowCount ?? 0, volumes: volumes.rowCount ?? 0 };
    });
  }

  async setDraining(name: string, draining: boolean): Promise<boolean> {
    const result = await this.db.query('draining a node', `UPDATE nodes SET draining = $2, change_seq = nextval('nodes_change_seq') WHERE name = $1`, [
      name,
      draining,
    ]);
    return result.rowCount === 1;
  }
}

/** A lost session's reason: the gateway's 410 quotes it. */
export function lostReason(node: string, lastHeartbeat: Date): string {
  return `node '${node}' stopped answering at ${lastHeartbeat.toISOString()} (its last heartbeat)`;
}
