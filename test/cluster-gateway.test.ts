/**
 * The gateway on a real PostgreSQL 15 (issue 22): the same contract as the unit tier's
 * in-memory store (test/helpers/gateway-contract.ts), with PgClusterStore underneath, fake
 * nodes (small real HTTP servers that record what they receive) in front of it, and the
 * database paused (SIGSTOP: connections open, nothing answers) for the "store down" case.
 */
import { describe } from 'node:test';
import { PgClusterStore } from '../src/cluster/store/pg-cluster-store.js';
import { gatewayContract } from './helpers/gateway-contract.js';
import { startPostgres } from './helpers/postgres.js';

const server = await startPostgres();

describe('the gateway on PostgreSQL', () => {
  gatewayContract(
    async () => {
      const store = new PgClusterStore({ url: server.url, timeoutMs: 1_000 });
      await store.migrate();
      return store;
    },
    {
      breakStore: () => {
        server.pause();
        return () => server.resume();
      },
    },
  );
});
