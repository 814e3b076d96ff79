import type Database from 'better-sqlite3';

/**
 * Makes `db.prepare(sql)` answer the statement it prepared before for the same SQL.
 * better-sqlite3 compiles the SQL on every prepare(), and the stores prepare where they run
 * (an API key, a token, a session's row: read or written on every request), which made the
 * compile a measurable share of a request. A statement is safe to reuse here: no caller
 * iterates one while running it again, nor changes its mode (pluck, raw, bind), which
 * test/unit/statement-cache.test.ts holds the tree to. Bounded: SQL built with values in it
 * (none today) would not grow the cache past `max`.
 */
export function cacheStatements(db: Database.Database, max = 512): void {
  const prepare = db.prepare.bind(db);
  const cache = new Map<string, Database.Statement>();
  const cached = (sql: string): Database.Statement => {
    let statement = cache.get(sql);
    if (!statement) {
      statement = prepare(sql);
      if (cache.size < max) cache.set(sql, statement);
    }
    return statement;
  };
  db.prepare = cached as Database.Database['prepare'];
}
