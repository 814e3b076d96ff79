/**
 * The cluster's schema, as numbered migrations applied in order, each once. Gateways and
 * nodes all call migrate() when they start, possibly at the same moment: the whole run
 * happens in one transaction holding a transaction-scoped advisory lock, so the second
 * process waits for the first to commit, then finds every migration applied and does
 * nothing. DDL is transactional in PostgreSQL: a migration that fails leaves no trace.
 * A migration, once released, is never edited: a change is a new one.
 */
import type pg from 'pg';
import type { Db } from './db.js';

export interface Migration {
  readonly version: number;
  readonly name: string;
  readonly sql: string;
}

/** pg_advisory_xact_lock's key: "sbxs" as a number, so it meets no other user's lock. */
export const MIGRATION_LOCK_KEY = 0x73627873;

/**
 * Commitment is kept on the node's row (sessions, committed_memory_mib, committed_vcpus),
 * changed only in the transactions that move a session into or out of creating/live, with
 * the node's row locked first (see directory.ts for the lock order). Summing the directory
 * at every placement would read every live session (10,000 rows for 1,000 nodes) per
 * create; the row is exact by construction instead, checked non-negative by the schema,
 * rebuilt from the directory when a node registers, and compared with the directory by the
 * tests after every race. vCPUs are numeric: sums of fractions stay exact.
 */
export const MIGRATIONS: readonly Migration[] = [
  {
    version: 1,
    name: 'nodes, session directory, api keys, view and run routes',
    sql: `
      CREATE SEQUENCE nodes_change_seq;
      CREATE TABLE nodes (
        name text PRIMARY KEY,
        instance text NOT NULL,
        url text NOT NULL,
        state text NOT NULL CHECK (state IN ('up', 'lost')),
        runtimes text[] NOT NULL,
        templates text[] NOT NULL,
        warm jsonb NOT NULL DEFAULT '{}',
        max_sessions integer NOT NULL CHECK (max_sessions >= 0),
        memory_mib integer NOT NULL CHECK (memory_mib >= 0),
        vcpus numeric(12, 3) NOT NULL CHECK (vcpus >= 0),
        session_memory_mib integer NOT NULL,
        session_vcpus numeric(12, 3) NOT NULL,
        draining boolean NOT NULL DEFAULT false,
        version text NOT NULL,
        last_heartbeat timestamptz NOT NULL,
        registered_at timestamptz NOT NULL,
        lost_at timestamptz,
        -- Set from nodes_change_seq by every change placement cares about (commitment,
        -- state, draining, a changed report; not a heartbeat that changes nothing else):
        -- a gateway rereads only the rows changed since its last read (placement-tx.ts).
        change_seq bigint NOT NULL DEFAULT nextval('nodes_change_seq'),
        sessions integer NOT NULL DEFAULT 0 CHECK (sessions >= 0),
        committed_memory_mib integer NOT NULL DEFAULT 0 CHECK (committed_memory_mib >= 0),
        committed_vcpus numeric(12, 3) NOT NULL DEFAULT 0 CHECK (committed_vcpus >= 0)
      );
      CREATE INDEX nodes_change ON nodes (change_seq);
      CREATE TABLE sessions (
        id text PRIMARY KEY,
        tenant text NOT NULL,
        node text NOT NULL REFERENCES nodes (name),
        state text NOT NULL CHECK (state IN ('creating', 'live', 'ended', 'lost')),
        memory_mib integer NOT NULL CHECK (memory_mib >= 0),
        vcpus numeric(12, 3) NOT NULL CHECK (vcpus >= 0),
        created_at timestamptz NOT NULL DEFAULT now(),
        ended_at timestamptz,
        reason text
      );
      -- On the node alone: a session's state change (confirm, end) then touches no indexed
      -- column, and PostgreSQL updates the row in place (a HOT update, no index write).
      CREATE INDEX sessions_node ON sessions (node);
      CREATE TABLE api_keys (
        id text PRIMARY KEY,
        tenant text NOT NULL,
        hash bytea NOT NULL,
        created_at timestamptz NOT NULL,
        expires_at timestamptz,
        revoked_at timestamptz
      );
      CREATE INDEX api_keys_tenant ON api_keys (tenant);
      CREATE TABLE view_routes (
        token_hash bytea PRIMARY KEY,
        session_id text NOT NULL,
        expires_at timestamptz NOT NULL
      );
      CREATE INDEX view_routes_expires ON view_routes (expires_at);
      CREATE TABLE run_routes (
        run_id text PRIMARY KEY,
        session_id text NOT NULL,
        created_at timestamptz NOT NULL DEFAULT now()
      );
    `,
  },
  {
    version: 2,
    name: "a tenant's live sessions, counted by placement",
    sql: `CREATE INDEX sessions_tenant_live ON sessions (tenant) WHERE state IN ('creating', 'live');`,
  },
  {
    version: 3,
    name: "volumes: each tenant's volume and the node whose disk holds it",
    // `creating` while its node is asked (the name is taken cluster-wide, not yet mountable).
    sql: `
      CREATE TABLE volumes (
        tenant text NOT NULL,
        name text NOT NULL,
        node text NOT NULL REFERENCES nodes (name),
        state text NOT NULL CHECK (state IN ('creating', 'ready')),
        size_mib integer NOT NULL CHECK (size_mib > 0),
        created_at timestamptz NOT NULL DEFAULT now(),
        PRIMARY KEY (tenant, name)
      );
      CREATE INDEX volumes_node ON volumes (node);
    `,
  },
  {
    version: 4,
    name: "a tenant's open sessions by ended_at, so that a confirm is updated in place",
    // Version 2's index named `state` in its predicate, so every confirm (creating -> live)
    // wrote a new entry in each index (no HOT update). `ended_at` changes only when a session
    // stops counting; a confirm now touches no indexed column, and pages keep room for it.
    sql: `
      CREATE INDEX sessions_tenant_open ON sessions (tenant) WHERE ended_at IS NULL;
      DROP INDEX sessions_tenant_live;
      ALTER TABLE sessions SET (fillfactor = 90);
    `,
  },
];

/**
 * Applies the migrations `migrations` lacks, in order, under the advisory lock. Returns the
 * versions this call applied (none when another process got there first). Versions this
 * code does not know (a newer process migrated first, during a rolling upgrade) are left
 * alone: migrations only add, so an older process keeps working on a newer schema.
 */
export async function migrate(db: Db, migrations: readonly Migration[] = MIGRATIONS): Promise<number[]> {
  return db.transaction('schema migration', async (client) => {
    // Waiting for another process's migrations may take longer than one statement's bound.
    const migrationTimeout = Math.max(60_000, db.timeoutMs);
    await client.query(`SET LOCAL statement_timeout = ${migrationTimeout}`);
    await client.query(`SET LOCAL lock_timeout = ${migrationTimeout}`);
    await client.query(longQuery('SELECT pg_advisory_xact_lock($1)', migrationTimeout, [MIGRATION_LOCK_KEY]));
    await client.query(`CREATE TABLE IF NOT EXISTS schema_migrations (
      version integer PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())`);
    const applied = new Set((await client.query<{ version: number }>('SELECT version FROM schema_migrations')).rows.map((row) => row.version));
    const done: number[] = [];
    for (const migration of [...migrations].sort((a, b) => a.version - b.version)) {
      if (applied.has(migration.version)) continue;
      await client.query(longQuery(migration.sql, migrationTimeout));
      await client.query('INSERT INTO schema_migrations (version, name) VALUES ($1, $2)', [migration.version, migration.name]);
      done.push(migration.version);
    }
    return done;
  });
}

/** A statement with its own client-side bound (pg reads query_timeout per query; its types omit it). */
function longQuery(text: string, timeoutMs: number, values: unknown[] = []): pg.QueryConfig {
  return { text, values, query_timeout: timeoutMs + 1000 } as pg.QueryConfig;
}
