import type Database from 'better-sqlite3';

/** A volume as stored: whose it is, its name and size. Its data is a file (volume-files.ts). */
export interface VolumeRecord {
  tenant: string;
  name: string;
  sizeMiB: number;
  createdAt: string;
}

interface Row {
  tenant: string;
  name: string;
  size_mib: number;
  created_at: string;
}

/** Volumes in the orchestrator's SQLite file, next to the sessions. A row exists before its file is made and goes after it is removed. */
export class VolumeStore {
  constructor(private readonly db: Database.Database) {
    db.exec(`
      CREATE TABLE IF NOT EXISTS volumes (
        tenant TEXT NOT NULL,
        name TEXT NOT NULL,
        size_mib INTEGER NOT NULL,
        created_at TEXT NOT NULL,
        PRIMARY KEY (tenant, name)
      );
    `);
  }

  /** False if the tenant has a volume of that name already. */
  insert(record: VolumeRecord): boolean {
    const res = this.db
      .prepare('INSERT OR IGNORE INTO volumes (tenant, name, size_mib, created_at) VALUES (?, ?, ?, ?)')
      .run(record.tenant, record.name, record.sizeMiB, record.createdAt);
    return res.changes === 1;
  }

  get(tenant: string, name: string): VolumeRecord | undefined {
    const row = this.db.prepare('SELECT * FROM volumes WHERE tenant = ? AND name = ?').get(tenant, name) as Row | undefined;
    return row && fromRow(row);
  }

  list(tenant: string): VolumeRecord[] {
    return (this.db.prepare('SELECT * FROM volumes WHERE tenant = ? ORDER BY name').all(tenant) as Row[]).map(fromRow);
  }

  /** Every tenant's (the host's free space is promised to all of them). */
  all(): VolumeRecord[] {
    return (this.db.prepare('SELECT * FROM volumes').all() as Row[]).map(fromRow);
  }

  delete(tenant: string, name: string): void {
    this.db.prepare('DELETE FROM volumes WHERE tenant = ? AND name = ?').run(tenant, name);
  }
}

function fromRow(row: Row): VolumeRecord {
  return { tenant: row.tenant, name: row.name, sizeMiB: row.size_mib, createdAt: row.created_at };
}
