/**
 * Where each tenant's volume lives (migration 3; docs/volumes.md, "through a gateway"). A volume
 * is a file on one node's disk: the gateway reserves its name on a node here, asks that node to
 * make it, then confirms it (or drops the row); every later request for it goes to that node,
 * and a session that mounts it is placed there (placement-tx.ts checks the rows again under
 * the node's lock).
 */
import type { VolumeEntry, VolumeRequest, VolumeReservation } from './cluster-store.js';
import type { Db } from './db.js';

interface VolumeRow {
  tenant: string;
  name: string;
  node: string;
  state: VolumeEntry['state'];
  size_mib: number;
  created_at: Date;
}

const COLUMNS = 'tenant, name, node, state, size_mib, created_at';

function entryOf(row: VolumeRow): VolumeEntry {
  return { tenant: row.tenant, name: row.name, node: row.node, state: row.state, sizeMiB: row.size_mib, createdAt: row.created_at };
}

/**
 * $1 tenant, $2 name, $3 size MiB, $4 runtime, $5 excluded nodes, $6 quota count, $7 quota MiB,
 * $8 staleMs. The node with the fewest volumes (then the emptiest for its size, then at random)
 * among the healthy, undrained ones running the runtime; the row inserted there unless the name
 * is taken or the tenant's volumes (as of the statement's start: two creates at the same moment
 * may pass a quota by their number; each node still enforces its own) would pass a quota.
 */
const RESERVE_SQL = `
  WITH quota AS (
    SELECT count(*) AS volumes, coalesce(sum(size_mib), 0) AS mib FROM volumes WHERE tenant = $1
  ), chosen AS (
    SELECT n.name FROM nodes n
    WHERE n.state = 'up' AND NOT n.draining AND $4::text = ANY (n.runtimes) AND NOT (n.name = ANY ($5::text[]))
      AND n.last_heartbeat > now() - ($8::double precision * interval '1 millisecond')
    ORDER BY (SELECT count(*) FROM volumes v WHERE v.node = n.name), n.sessions::float8 / greatest(n.max_sessions, 1), random()
    LIMIT 1
  ), inserted AS (
    INSERT INTO volumes (tenant, name, node, state, size_mib)
    SELECT $1, $2, chosen.name, 'creating', $3::int FROM chosen, quota WHERE quota.volumes + 1 <= $6::int AND quota.mib + $3::int <= $7::int
    ON CONFLICT (tenant, name) DO NOTHING
    RETURNING node
  )
  SELECT (SELECT node FROM inserted) AS node, (SELECT name FROM chosen) AS chosen,
    EXISTS (SELECT 1 FROM volumes WHERE tenant = $1 AND name = $2) AS taken, quota.volumes::int AS volumes, quota.mib::int AS mib
  FROM quota`;

export class VolumeDirectory {
  constructor(
    private readonly db: Db,
    private readonly staleMs: number,
  ) {}

  async reserve(request: VolumeRequest, exclude: readonly string[]): Promise<VolumeReservation> {
    const { tenant, name, sizeMiB, runtime, quota } = request;
    const result = await this.db.query<{ node: string | null; chosen: string | null; taken: boolean; volumes: number; mib: number }>(
      'reserving a volume',
      RESERVE_SQL,
      [tenant, name, sizeMiB, runtime, [...exclude], quota.count, quota.mib, this.staleMs],
    );
    const row = result.rows[0];
    if (!row) throw new Error('reserving a volume returned no row');
    if (row.node !== null) return { reserved: true, node: row.node };
    // `taken` is read in the statement's snapshot: a name taken before it (or by a racing create, which the conflict caught).
    const why =
      row.taken || (row.chosen !== null && row.volumes + 1 <= quota.count && row.mib + sizeMiB <= quota.mib)
        ? 'exists'
        : row.chosen === null
          ? 'no_node'
          : 'quota';
    return { reserved: false, why, volumes: row.volumes, mib: row.mib };
  }

  async confirm(tenant: string, name: string): Promise<void> {
    await this.db.query('confirming a volume', `UPDATE volumes SET state = 'ready' WHERE tenant = $1 AND name = $2`, [tenant, name]);
  }

  async drop(tenant: string, name: string): Promise<void> {
    await this.db.query('dropping a volume', 'DELETE FROM volumes WHERE tenant = $1 AND name = $2', [tenant, name]);
  }

  async lookup(tenant: string, name: string): Promise<VolumeEntry | undefined> {
    const row = (await this.db.query<VolumeRow>('looking up a volume', `SELECT ${COLUMNS} FROM volumes WHERE tenant = $1 AND name = $2`, [tenant, name]))
      .rows[0];
    return row && entryOf(row);
  }

  async list(tenant: string): Promise<VolumeEntry[]> {
    const result = await this.db.query<VolumeRow>("listing a tenant's volumes", `SELECT ${COLUMNS} FROM volumes WHERE tenant = $1 ORDER BY name`, [tenant]);
    return result.rows.map(entryOf);
  }
}
