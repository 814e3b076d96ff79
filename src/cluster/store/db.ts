/**
 * The connection pool and the two ways the store talks through it: one statement, or one
 * transaction. Every wait is bounded, so a database that is down, paused or partitioned
 * costs a caller about `timeoutMs` and a ClusterStateUnavailableError, never a hang:
 *   - connecting (and waiting for a free client of the pool): connectionTimeoutMillis;
 *   - a statement: statement_timeout on the server and query_timeout in the client (the
 *     server cannot enforce anything when it is stopped or unreachable);
 *   - a transaction left open by a caller that died: idle_in_transaction_session_timeout;
 *   - a dead peer on an idle connection: TCP keepalive.
 * An idle client's error (the server restarted) is an 'error' event on the pool: it is
 * logged and the client dropped, never an uncaught exception that would end the process.
 */
import pg from 'pg';
import { asStoreError, isUnavailability } from './errors.js';

export interface DbSettings {
  /** postgres://user:password@host:port/database (or ?host=/socket/dir). */
  readonly url: string;
  /** The bound on connecting and on any one statement (ms); 2000 by default. */
  readonly timeoutMs?: number;
  /** Connections this process keeps at most; 10 by default. */
  readonly maxConnections?: number;
  /** Told of an idle connection's error (the pool drops that connection by itself). */
  readonly onIdleError?: (error: Error) => void;
}

export const DEFAULT_TIMEOUT_MS = 2000;

export type Queryable = Pick<pg.PoolClient, 'query'>;

export class Db {
  readonly pool: pg.Pool;
  readonly timeoutMs: number;

  constructor(settings: DbSettings) {
    this.timeoutMs = settings.timeoutMs ?? DEFAULT_TIMEOUT_MS;
    this.pool = new pg.Pool({
      connectionString: settings.url,
      max: settings.maxConnections ?? 10,
      connectionTimeoutMillis: this.timeoutMs,
      statement_timeout: this.timeoutMs,
      // A little later than the server's own, so that a reachable server's clearer error wins.
      query_timeout: this.timeoutMs + 250,
      lock_timeout: this.timeoutMs,
      idle_in_transaction_session_timeout: Math.max(5000, this.timeoutMs * 3),
      keepAlive: true,
      keepAliveInitialDelayMillis: 5000,
      idleTimeoutMillis: 30_000,
      application_name: 'sbx-cluster',
    });
    const onIdleError = settings.onIdleError ?? (() => {});
    this.pool.on('error', (error) => onIdleError(error));
  }

  /** One statement on any free connection; `name` prepares it once per connection (a hot path). */
  async query<R extends pg.QueryResultRow>(what: string, text: string, values: readonly unknown[] = [], name?: string): Promise<pg.QueryResult<R>> {
    try {
      return await this.pool.query<R>(name === undefined ? { text, values: values as unknown[] } : { name, text, values: values as unknown[] });
    } catch (error) {
      throw asStoreError(what, error);
    }
  }

  /** One statement whose rows come as arrays (no object a row: a hot read of many rows). */
  async queryArrays<R extends unknown[]>(what: string, text: string, values: readonly unknown[] = []): Promise<R[]> {
    try {
      return (await this.pool.query<R>({ text, values: values as unknown[], rowMode: 'array' })).rows;
    } catch (error) {
      throw asStoreError(what, error);
    }
  }

  /**
   * `body` inside BEGIN ... COMMIT on one connection; ROLLBACK on any error. A connection
   * whose transaction failed for the database's sake (timeout, reset) is destroyed, not
   * returned to the pool, since its state is unknown.
   */
  async transaction<T>(what: string, body: (client: pg.PoolClient) => Promise<T>): Promise<T> {
    let client: pg.PoolClient;
    try {
      client = await this.pool.connect();
    } catch (error) {
      throw asStoreError(what, error);
    }
    // A client that errors while checked out emits 'error' on itself, not on the pool.
    const onError = (): void => {};
    client.on('error', onError);
    let broken: Error | undefined;
    try {
      await client.query('BEGIN');
      const result = await body(client);
      await client.query('COMMIT');
      return result;
    } catch (error) {
      broken = error instanceof Error ? error : new Error(String(error));
      // No answer at all (timeout, reset): do not wait for a ROLLBACK that will not come
      // either; the connection is destroyed and the server rolls back alone. Otherwise (the
      // server said no, or the body threw) roll back and keep the connection.
      if (!(isUnavailability(error) && !hasSqlState(error))) {
        try {
          await client.query('ROLLBACK');
          broken = undefined;
        } catch {
          // gone after all: destroyed below
        }
      }
      throw asStoreError(what, error);
    } finally {
      client.off('error', onError);
      client.release(broken);
    }
  }

  async close(): Promise<void> {
    await this.pool.end();
  }
}

function hasSqlState(error: unknown): boolean {
  const code = (error as { code?: unknown } | null)?.code;
  return typeof code === 'string' && /^[0-9A-Z]{5}$/.test(code);
}
