/**
 * The placement transaction (issue 22): read the nodes, choose with placement.ts, then ONE
 * statement, which PostgreSQL runs as one transaction: lock the chosen node's row (FOR
 * UPDATE), check the create still fits the row as it is once locked, insert the directory
 * row (`creating`) and add the create to the node's commitment, commit. Two gateways
 * choosing the same node serialize on its row: the second's check sees the first's
 * commitment, and if the node is full by then nothing is written and the gateway chooses
 * again (a bounded number of times) with what the lock saw.
 *
 * The read before it needs no transaction of its own: under READ COMMITTED each statement
 * sees its own snapshot, inside a BEGIN or not, and correctness rests on the check under the
 * lock alone. Keeping the lock, check and commit in one statement keeps a create at two round
 * trips at most (the read, the statement) where BEGIN, read, lock, write, COMMIT took five.
 *
 * Reading all 1,000 node rows per create cost more than everything else in it (~1 ms of
 * PostgreSQL and 3 ms of the gateway's CPU per read on a loaded 2-core host), so a gateway
 * keeps a view of the nodes: per create it reads only the rows changed since (every change
 * placement cares about takes a new nodes.change_seq), with a margin for changes committed
 * out of order, and not even that within 25 ms of the last read; every second, every node's
 * liveness (four numbers a row) and the rows it has not seen. Health is judged on
 * PostgreSQL's clock. The view can make a choice worse (a node fuller than it looked: one
 * more statement), never wrong; a create nobody can take is answered from a fresh read of
 * every node, never from the view. (docs/benchmarks.md: 51-85 -> 180-379 creates a second.)
 * The view (node-view.ts) keeps one object a node, updated in place, so that placement draws
 * its sample without walking all 1,000 (placement.ts's NodeSampler).
 */
import { place, type NodeSampler, type PlacementOptions, type PlacementRequest } from '../placement.js';
import type { NodeRecord, PlacementOutcome } from './cluster-store.js';
import type { Db } from './db.js';
import { TenantLimitError } from '../../errors.js';
import { SessionIdTakenError } from './errors.js';
import { nodeColumns, nodeRecordOf, type NodeRow } from './node-rows.js';
import { NodeView, type ViewRow } from './node-view.js';

/** How many nodes one create may find full under their lock before it gives up. */
export const DEFAULT_MAX_CHOICES = 5;
/** Every row is reread at least this often (ms): bounds how old a missed change can get. */
export const FULL_READ_MS = 1000;
/**
 * Rows reread below the newest change seen: a statement takes its change_seq before it
 * commits, so a concurrent one may commit a lower number after a higher one was read.
 * (A change missed even so is seen at the next full read; meanwhile it can only cost a
 * create one more statement.)
 */
export const CHANGE_MARGIN = 8;
/**
 * A view read this recently (ms) is used as it is: a gateway placing hundreds of creates a
 * second reads once per this, not once per create. Its own placements are in its view at
 * once; another gateway's show up within this. (E2B's scheduler works from a snapshot
 * seconds old; the check under the lock makes staleness cost a retry, never an overfill.)
 */
export const VIEW_REUSE_MS = 25;
/** Retry-After of a create past its tenant's limit (as a node answers it: sessions/capacity.ts). */
const TENANT_RETRY_AFTER_SECONDS = 10;

/**
 * $1 staleMs, $2 session id, $3 tenant, $4 node, $5 memory MiB, $6 vCPUs, $7 runtime,
 * $8 template, $10 the create's volumes (null: none; else all of them must be the tenant's,
 * ready, on this node: `volumes_there`), $9 the tenant's session limit in the cluster (null: none; the tenant's
 * creating and live sessions are counted as of the statement's start, so creates of one
 * tenant at the same moment may pass it by their number: each node still enforces its own).
 * Returns the node's row after the create (placed) or as the lock found it
 * (not placed; `duplicate` when the directory holds the session id already, and nothing was
 * written: the caller retries with a new id); no row if the node is gone. The fit is placement.ts's unfitFor, in SQL.
 * `locked` is read once its lock is granted, so it is the row as the previous holder left it;
 * the UPDATE then applies to that same (newest) version. A warm sandbox of the template is
 * counted as taken (the node is likely to claim it): the next create does not count on it
 * too; the node's next heartbeat says how many it has again.
 */
const PLACE_SQL = `
  WITH locked AS (
    SELECT ${nodeColumns(1)} FROM nodes WHERE name = $4 FOR UPDATE
  ), tenant AS (
    SELECT count(*) AS live FROM sessions WHERE $9::int IS NOT NULL AND tenant = $3 AND ended_at IS NULL AND state IN ('creating', 'live')
  ), volumes AS (
    SELECT $10::text[] IS NULL OR (SELECT count(*) FROM volumes v WHERE v.tenant = $3 AND v.name = ANY ($10::text[]) AND v.node = $4 AND v.state = 'ready')
      = cardinality($10::text[]) AS there
  ), fit AS (
    SELECT name FROM locked, tenant, volumes
    WHERE volumes.there AND healthy AND NOT draining AND $7::text = ANY (runtimes) AND $8::text = ANY (templates)
      AND sessions + 1 <= max_sessions AND committed_memory_mib + $5 <= memory_mib AND committed_vcpus + $6 <= vcpus
      AND ($9::int IS NULL OR tenant.live < $9::int)
  ), directory AS (
    INSERT INTO sessions (id, tenant, node, state, memory_mib, vcpus) SELECT $2, $3, fit.name, 'creating', $5, $6 FROM fit
    ON CONFLICT (id) DO NOTHING
    RETURNING node
  ), counted AS (
    UPDATE nodes SET sessions = nodes.sessions + 1, committed_memory_mib = nodes.committed_memory_mib + $5,
      committed_vcpus = nodes.committed_vcpus + $6, change_seq = nextval('nodes_change_seq'),
      warm = CASE WHEN (nodes.warm ->> $8::text)::int > 0 THEN jsonb_set(nodes.warm, ARRAY[$8::text], to_jsonb((nodes.warm ->> $8::text)::int - 1)) ELSE nodes.warm END
    FROM directory WHERE nodes.name = directory.node
    RETURNING ${nodeColumns(1, 'nodes')}
  )
  SELECT true AS placed, false AS duplicate, 0::bigint AS tenant_live, true AS volumes_there, * FROM counted
  UNION ALL
  SELECT false AS placed, false AS duplicate, (SELECT live FROM tenant) AS tenant_live, (SELECT there FROM volumes) AS volumes_there, *
  FROM locked WHERE NOT EXISTS (SELECT 1 FROM fit)
  UNION ALL
  SELECT false AS placed, true AS duplicate, 0::bigint AS tenant_live, true AS volumes_there, *
  FROM locked WHERE EXISTS (SELECT 1 FROM fit) AND NOT EXISTS (SELECT 1 FROM directory)`;

/** What the view holds of a node (node-view.ts's ViewRow): what placement needs, numbers as numbers (no date or numeric to parse). */
const VIEW_COLUMNS = `name, state, runtimes, templates, warm, max_sessions, memory_mib, vcpus::float8 AS vcpus, draining,
  change_seq::float8 AS change_seq, sessions, committed_memory_mib, committed_vcpus::float8 AS committed_vcpus,
  (extract(epoch FROM last_heartbeat) * 1000)::float8 AS heartbeat_ms`;
/** $1: the change_seq read from. Joined to now() so that a read finding no changed row still says what time it is. */
const CHANGED_SQL = `SELECT t.db_now_ms, n.*
  FROM (SELECT (extract(epoch FROM now()) * 1000)::float8 AS db_now_ms) t
  LEFT JOIN (SELECT ${VIEW_COLUMNS} FROM nodes WHERE change_seq > $1) n ON true`;
/** Every node's liveness (a heartbeat takes no change_seq) and change_seq: four numbers a row. */
const LIVENESS_SQL = `SELECT name, change_seq::float8, (extract(epoch FROM last_heartbeat) * 1000)::float8, state = 'up',
  (extract(epoch FROM now()) * 1000)::float8 FROM nodes`;
const ROWS_SQL = `SELECT ${VIEW_COLUMNS} FROM nodes WHERE name = ANY ($1::text[])`;

type PlaceRow = NodeRow & { placed: boolean; duplicate: boolean; tenant_live: string; volumes_there: boolean };

export interface PlacementTxOptions extends Omit<PlacementOptions, 'exclude'> {
  readonly maxChoices?: number;
}

export class PlacementTx {
  /**
   * Concurrent creates of one gateway read the same view and would all choose the same
   * best node (a herd: 30 creates six at a time onto nodes of 8, 16 and 24 vCPUs gave
   * 4/13/13 instead of 5/10/15). Each choice counts in the view at once, before any await,
   * and the others see it; the statement's answer then replaces it with the node's row.
   */
  private readonly view: NodeView;
  private lastFullRead = 0;
  private lastRead = 0;
  /** PostgreSQL's clock minus ours, as of the last read. */
  private clockOffset = 0;

  constructor(
    private readonly db: Db,
    private readonly staleMs: number,
    private readonly options: PlacementTxOptions = {},
  ) {
    this.view = new NodeView(staleMs);
  }

  /** `limit`: the tenant's sessions (creating or live) the cluster may hold; a create past it is a 429 tenant_session_limit. */
  async place(sessionId: string, tenant: string, request: PlacementRequest, exclude: readonly string[], limit?: number): Promise<PlacementOutcome> {
    const choose = { ...this.options, exclude: new Set(exclude) };
    const maxChoices = Math.max(1, this.options.maxChoices ?? DEFAULT_MAX_CHOICES);
    let nodes = await this.read(false);
    let fresh = false;
    const full: string[] = [];
    for (let choice = 0; choice < maxChoices; choice++) {
      let placement = place(request, nodes, choose);
      if (!placement.ok && !fresh) {
        // Never refuse on the view: read every row and choose again.
        nodes = await this.read(true);
        fresh = true;
        placement = place(request, nodes, choose);
      }
      if (!placement.ok) {
        return { placed: false, reason: full.length === 0 ? placement.reason : `${placement.reason} (${filledUp(full)})` };
      }
      const name = placement.node.name;
      const release = this.view.takeInFlight(name, request);
      let row: PlaceRow | undefined;
      let record: NodeRecord | undefined;
      try {
        const result = await this.db.query<PlaceRow>(
          'placing a session',
          PLACE_SQL,
          [
            this.staleMs,
            sessionId,
            tenant,
            name,
            request.memoryMiB,
            request.vcpus,
            request.runtime,
            request.template,
            limit ?? null,
            request.volumes?.names ?? null,
          ],
          'sbx-place',
        );
        row = result.rows[0];
        record = row && nodeRecordOf(row);
        // In the view before the in-flight count goes (same tick): never counted twice, nor not at all.
        if (row && record) {
          this.view.remember(viewOf(row, record), Date.now() + this.clockOffset);
          this.view.setHealthy(name, record.healthy); // as PostgreSQL judged it under the lock
        }
      } finally {
        release();
      }
      if (row?.placed && record) return { placed: true, node: record };
      if (row?.duplicate) throw new SessionIdTakenError(sessionId);
      // Deleted (or not yet made) since the gateway looked: no other node holds them, so no retry.
      if (row && !row.volumes_there)
        return { placed: false, reason: `the volumes ${request.volumes?.names.join(', ')} are not (or no longer) all on node '${name}'` };
      const live = Number(row?.tenant_live ?? 0);
      if (limit !== undefined && live >= limit) {
        throw new TenantLimitError(
          `tenant "${tenant}" has ${live} sessions in the cluster, its limit (SBX_MAX_SESSIONS_PER_TENANT=${limit}): destroy one, or retry later`,
          TENANT_RETRY_AFTER_SECONDS,
        );
      }
      // Filled (or drained, or lost) since the read: the view now holds the row as the lock
      // saw it (or not the node, gone); choose again.
      full.push(name);
      if (!row) this.view.forget(name);
      nodes = this.view.nodes();
    }
    return { placed: false, reason: `no node could take this create: ${filledUp(full)}` };
  }

  /**
   * The nodes as placement sees them: the view, brought up to date by the rows changed since
   * it was last read; and at least once a second (or when `everything`), every node's
   * liveness, with the rows whose change_seq the view has not seen.
   */
  private async read(everything: boolean): Promise<NodeSampler> {
    const readAt = Date.now();
    let dbNow = readAt + this.clockOffset;
    if (!everything && this.view.size > 0 && readAt - this.lastRead < VIEW_REUSE_MS) {
      this.view.judgeAll(dbNow, false);
      return this.view.nodes();
    }
    this.lastRead = readAt;
    if (everything || this.view.size === 0 || readAt - this.lastFullRead >= FULL_READ_MS) {
      this.lastFullRead = readAt;
      const liveness = await this.db.queryArrays<[string, number, number, boolean, number]>('reading the nodes', LIVENESS_SQL);
      const unseen: string[] = [];
      const names = new Set<string>();
      let newestRead = 0;
      for (const [name, changeSeq, heartbeat, up, now] of liveness) {
        dbNow = now;
        names.add(name);
        if (changeSeq > newestRead) newestRead = changeSeq;
        if (!this.view.heard(name, changeSeq, heartbeat, up)) unseen.push(name);
      }
      this.view.keepOnly(names, newestRead);
      if (unseen.length > 0) {
        for (const row of (await this.db.query<ViewRow>('reading the nodes', ROWS_SQL, [unseen], 'sbx-place-rows')).rows) this.view.remember(row, dbNow);
      }
      this.view.judgeAll(dbNow, true);
    } else {
      const changed = await this.db.query<ViewRow & { db_now_ms: number }>(
        'reading the nodes',
        CHANGED_SQL,
        [Math.max(-1, this.view.newestChange - CHANGE_MARGIN)],
        'sbx-place-changed',
      );
      for (const row of changed.rows) {
        dbNow = row.db_now_ms;
        if (row.name !== null) this.view.remember(row, dbNow);
      }
      this.view.judgeAll(dbNow, false);
    }
    this.clockOffset = dbNow - readAt;
    return this.view.nodes();
  }
}

/** The statement's full row, as the view holds it. */
function viewOf(row: NodeRow, record: NodeRecord): ViewRow {
  return {
    name: row.name,
    state: row.state,
    runtimes: row.runtimes,
    templates: row.templates,
    warm: row.warm,
    max_sessions: row.max_sessions,
    memory_mib: row.memory_mib,
    vcpus: record.capacity.vcpus.total,
    draining: row.draining,
    change_seq: Number(row.change_seq),
    sessions: row.sessions,
    committed_memory_mib: row.committed_memory_mib,
    committed_vcpus: record.capacity.vcpus.committed,
    heartbeat_ms: row.last_heartbeat.getTime(),
  };
}

function filledUp(names: readonly string[]): string {
  return `${names.map((name) => `'${name}'`).join(', ')} filled up while this create was placed`;
}
