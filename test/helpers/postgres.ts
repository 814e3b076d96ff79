/**
 * A PostgreSQL 15 server of the test file's own (src/cluster/store/throwaway-postgres.ts):
 * a fresh data directory, 127.0.0.1 at a free port, never the package's cluster on 5432.
 * Stopped and removed after the file's tests, whether they passed or not (and at the
 * process's exit, should the file be killed before its after() hooks run).
 */
import { after } from 'node:test';
import { startThrowawayPostgres, type ThrowawayPostgres, type ThrowawayPostgresOptions } from '../../src/cluster/store/throwaway-postgres.js';

export type TestPostgres = ThrowawayPostgres;

export async function startPostgres(options: ThrowawayPostgresOptions = {}): Promise<TestPostgres> {
  const server = await startThrowawayPostgres(options);
  after(() => server.stop());
  return server;
}
