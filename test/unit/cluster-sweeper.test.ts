/**
 * The sweep for lost nodes (src/cluster/gateway/sweeper.ts): after a database outage every
 * node's last heartbeat is old, so a gateway marks nothing lost until it has seen the
 * database answer for a whole lostAfterMs (issue 22: "everything recovers without a restart").
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { pino } from 'pino';
import { ClusterState } from '../../src/cluster/gateway/cluster-state.js';
import { GatewayMetrics } from '../../src/cluster/gateway/metrics.js';
import { startSweeper } from '../../src/cluster/gateway/sweeper.js';
import { MemoryClusterStore } from '../helpers/memory-cluster-store.js';

class CountingStore extends MemoryClusterStore {
  marks = 0;
  override async markLostNodes(): Promise<string[]> {
    if (this.mode === 'fail') return super.markLostNodes(0);
    this.marks += 1;
    return [];
  }
}

describe('the sweep for lost nodes', () => {
  it('marks nothing until the database has answered for lostAfterMs, again after each outage', async () => {
    let clock = 0;
    const store = new CountingStore();
    const logger = pino({ level: 'silent' });
    const metrics = new GatewayMetrics();
    const state = new ClusterState({ store, logger, metrics, storeTimeoutMs: 1000, directoryCacheMs: 0, keyCacheMs: 0, now: () => clock });
    const sweeper = startSweeper(state, { lostAfterMs: 10_000, intervalMs: 3_600_000, logger, metrics, now: () => clock });
    try {
      await sweeper.sweep(); // t = 0: the database answers, from now on
      clock = 9_000;
      await sweeper.sweep();
      assert.equal(store.marks, 0, 'not yet a whole lostAfterMs of answers');
      clock = 10_000;
      await sweeper.sweep();
      assert.equal(store.marks, 1);
      store.mode = 'fail'; // the outage
      clock = 12_000;
      await sweeper.sweep();
      store.mode = 'up';
      clock = 25_000; // back: every heartbeat is 13 s old, yet nothing is marked
      await sweeper.sweep();
      clock = 34_000;
      await sweeper.sweep();
      assert.equal(store.marks, 1, 'nothing marked in the first lostAfterMs after the outage');
      clock = 35_000;
      await sweeper.sweep();
      assert.equal(store.marks, 2);
    } finally {
      sweeper.stop();
    }
  });
});
