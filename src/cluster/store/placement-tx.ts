/**
 * The placement transaction (issue 22): read the nodes, choose with placement.ts, lock the
 * chosen node's row, check the create still fits under the lock, commit its directory row
 * and its commitment. Two gateways choosing the same node serialize on its row: the second
 * sees the first's commitment when its lock is granted, and if the node is full by then it
 * chooses again (a bounded number of times) in the same transaction.
 *
 * Reading 1,000 node rows per create is most of the cost, so the read is split: what moves
 * with every create (commitment, health, draining, report_seq) is read every time; what a
 * node reports (runtimes, templates, warm counts, totals) is cached per node and reread only
 * when the node's report_seq moved, which a heartbeat bumps only when the report changed.
 * The check under the lock reads the whole row afresh: the cache can make a choice worse,
 * never wrong.
 */
import type pg from 'pg';
import { place, unfitFor, type NodeSnapshot, type PlacementOptions, type PlacementRequest } from '../placement.js';
import type { PlacementOutcome } from './cluster-store.js';
import type { Db } from './db.js';
import { nodeColumns, nodeRecordOf, type NodeRow } from './node-rows.js';

/** How many nodes one create may find full under their lock before it gives up. */
export const DEFAULT_MAX_CHOICES = 5;

interface Report {
  readonly seq: string;
  readonly runtimes: NodeSnapshot['runtimes'];
  readonly templates: readonly string[];
  readonly warm: Readonly<Record<string, number>>;
  readonly maxSessions: number;
  readonly memoryMiB: number;
  readonly vcpus: number;
}

type MovingRow = [name: string, seq: string, healthy: boolean, draining: boolean, sessions: number, memory: number, vcpus: string];

export interface PlacementTxOptions extends Omit<PlacementOptions, 'exclude'> {
  readonly maxChoices?: number;
}

export class PlacementTx {
  private readonly reports = new Map<string, Report>();

  constructor(
    private readonly db: Db,
    private readonly staleMs: number,
    private readonly options: PlacementTxOptions = {},
  ) {}

  async place(sessionId: string, tenant: string, request: PlacementRequest, exclude: readonly string[]): Promise<PlacementOutcome> {
    const excluded = new Set(exclude);
    const maxChoices = Math.max(1, this.options.maxChoices ?? DEFAULT_MAX_CHOICES);
    // The savepoint is taken with BEGIN (no round trip of its own): rolling back to it
    // releases the lock of a node found full, so a transaction never holds two nodes' locks.
    return this.db.transaction('placing a session', async (client) => {
      const snapshots = await this.readSnapshots(client);
      const full: string[] = [];
      for (let choice = 0; choice < maxChoices; choice++) {
        const placement = place(request, snapshots, { ...this.options, exclude: excluded });
        if (!placement.ok) {
          return { placed: false, reason: full.length === 0 ? placement.reason : `${placement.reason} (${filledUp(full)})` };
        }
        const name = placement.node.name;
        const locked = (await client.query<NodeRow>(`SELECT ${nodeColumns(1)} FROM nodes WHERE name = $2 FOR UPDATE`, [this.staleMs, name])).rows[0];
        const current = locked && nodeRecordOf(locked);
        if (current && unfitFor(current, request, excluded) === undefined) {
          const committed = await client.query<NodeRow>(
            `WITH directory AS (
               INSERT INTO sessions (id, tenant, node, state, memory_mib, vcpus) VALUES ($2, $3, $4, 'creating', $5, $6)
             )
             UPDATE nodes SET sessions = sessions + 1, committed_memory_mib = committed_memory_mib + $5,
               committed_vcpus = committed_vcpus + $6
             WHERE name = $4 RETURNING ${nodeColumns(1)}`,
            [this.staleMs, sessionId, tenant, name, request.memoryMiB, request.vcpus],
          );
          return { placed: true, node: nodeRecordOf(committed.rows[0] as NodeRow) };
        }
        // Filled (or drained, or lost) since the read: choose again with what the lock saw.
        await client.query('ROLLBACK TO SAVEPOINT choice');
        full.push(name);
        const index = snapshots.findIndex((snapshot) => snapshot.name === name);
        if (current) snapshots[index] = current;
        else snapshots.splice(index, 1);
      }
      return { placed: false, reason: `no node could take this create: ${filledUp(full)}` };
    }, 'BEGIN; SAVEPOINT choice');
  }

  /** Every node as placement sees it, with the reports cache brought up to date. */
  private async readSnapshots(client: pg.PoolClient): Promise<NodeSnapshot[]> {
    const moving = await client.query<MovingRow>({
      text: `SELECT name, report_seq, state = 'up' AND last_heartbeat > now() - ($1::double precision * interval '1 millisecond'),
               draining, sessions, committed_memory_mib, committed_vcpus FROM nodes`,
      values: [this.staleMs],
      rowMode: 'array',
    });
    const stale = moving.rows.filter(([name, seq]) => this.reports.get(name)?.seq !== seq).map(([name]) => name);
    if (stale.length > 0) await this.refreshReports(client, stale);
    const snapshots: NodeSnapshot[] = [];
    for (const [name, , healthy, draining, sessions, memory, vcpus] of moving.rows) {
      const report = this.reports.get(name);
      if (!report) continue; // registered after the first read and gone before the second: next time
      snapshots.push({
        name,
        runtimes: report.runtimes,
        templates: report.templates,
        warm: report.warm,
        capacity: {
          maxSessions: report.maxSessions,
          sessions,
          memoryMiB: { total: report.memoryMiB, committed: memory },
          vcpus: { total: report.vcpus, committed: Number(vcpus) },
        },
        draining,
        healthy,
      });
    }
    return snapshots;
  }

  private async refreshReports(client: pg.PoolClient, names: string[]): Promise<void> {
    const rows = await client.query<NodeRow>(`SELECT ${nodeColumns(1)} FROM nodes WHERE name = ANY($2::text[])`, [this.staleMs, names]);
    for (const row of rows.rows) {
      const known = this.reports.get(row.name);
      // Two placements may refresh at once: keep the newer report.
      if (known && BigInt(known.seq) > BigInt(row.report_seq)) continue;
      this.reports.set(row.name, {
        seq: row.report_seq,
        runtimes: row.runtimes as NodeSnapshot['runtimes'],
        templates: row.templates,
        warm: row.warm,
        maxSessions: row.max_sessions,
        memoryMiB: row.memory_mib,
        vcpus: Number(row.vcpus),
      });
    }
  }
}

function filledUp(names: readonly string[]): string {
  return `${names.map((name) => `'${name}'`).join(', ')} filled up while this create was placed`;
}
