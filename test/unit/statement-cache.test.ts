import assert from 'node:assert/strict';
import { readdir, readFile } from 'node:fs/promises';
import path from 'node:path';
import { describe, it } from 'node:test';
import Database from 'better-sqlite3';
import { cacheStatements } from '../../src/util/statement-cache.js';

/** Every .ts file under src/, recursively. */
async function sources(dir: string): Promise<string[]> {
  const out: string[] = [];
  for (const entry of await readdir(dir, { withFileTypes: true })) {
    const full = path.join(dir, entry.name);
    if (entry.isDirectory()) out.push(...(await sources(full)));
    else if (entry.name.endsWith('.ts')) out.push(full);
  }
  return out;
}

describe('the statement cache (util/statement-cache.ts)', () => {
  it('answers the same statement for the same SQL, and it still reads what the table holds, after a change of schema too', () => {
    const db = new Database(':memory:');
    cacheStatements(db);
    db.exec('CREATE TABLE t (id TEXT PRIMARY KEY, n INTEGER)');
    const select = 'SELECT * FROM t WHERE id = ?';
    assert.equal(db.prepare(select), db.prepare(select));
    assert.notEqual(db.prepare(select), db.prepare('SELECT id FROM t WHERE id = ?'));
    db.prepare('INSERT INTO t (id, n) VALUES (?, ?)').run('a', 1);
    db.prepare('INSERT INTO t (id, n) VALUES (?, ?)').run('b', 2);
    assert.deepEqual(db.prepare(select).get('b'), { id: 'b', n: 2 });
    db.exec("ALTER TABLE t ADD COLUMN label TEXT NOT NULL DEFAULT 'x'");
    assert.deepEqual(db.prepare(select).get('a'), { id: 'a', n: 1, label: 'x' });
    db.close();
  });

  it('is bounded: SQL past the cap is prepared each time, not kept', () => {
    const db = new Database(':memory:');
    cacheStatements(db, 2);
    db.prepare('SELECT 1');
    db.prepare('SELECT 2');
    assert.equal(db.prepare('SELECT 1'), db.prepare('SELECT 1'));
    assert.notEqual(db.prepare('SELECT 3'), db.prepare('SELECT 3'));
    db.close();
  });

  it('the tree never changes a statement it shares: no iterate, pluck, raw, expand, bind or safeIntegers on a SQLite statement', async () => {
    const root = path.resolve(import.meta.dirname, '../../src');
    const offending: string[] = [];
    for (const file of await sources(root)) {
      if (file.includes(`${path.sep}cluster${path.sep}`)) continue; // PostgreSQL, not SQLite
      const text = await readFile(file, 'utf8');
      if (!text.includes('.prepare(')) continue;
      for (const [i, line] of text.split('\n').entries()) {
        if (/\.(iterate|pluck|raw|expand|safeIntegers)\(/.test(line) || /\.prepare\([^)]*\)\s*\.bind\(/.test(line))
          offending.push(`${path.relative(root, file)}:${i + 1}`);
      }
    }
    assert.deepEqual(offending, []);
  });
});
