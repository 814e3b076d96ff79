import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { AddressPool } from '../src/network/address-pool.js';
import { run } from '../src/util/exec.js';
import { guestAddress } from './helpers/guest.js';
import { startTestOrchestrator, TEST_SUBNET, type TestOrchestrator } from './helpers/orchestrator.js';

/**
 * A block of the sandbox subnet whose address some host interface holds already (another
 * orchestrator given the same subnet, a sandbox a killed process left behind) is not leased:
 * the session would be unreachable, or reach the wrong guest.
 */
describe('address leases avoid addresses already on the host', () => {
  let orch: TestOrchestrator;
  // Not our prefix: the network policy fences every interface that carries it.
  const squatter = `sq${process.pid % 100000}`;
  const first = new AddressPool(TEST_SUBNET).describe(0);

  before(async () => {
    orch = await startTestOrchestrator();
    await run(['ip', 'link', 'add', squatter, 'type', 'veth', 'peer', 'name', `${squatter}p`]);
    await run(['ip', 'addr', 'add', `${first.gateway}/30`, 'dev', squatter]);
  });
  after(async () => {
    await run(['ip', 'link', 'delete', squatter], { allowFailure: true });
    await orch?.stop();
  });

  it('skips the taken block, and the session works on the next one', async () => {
    const res = await orch.server.inject({ method: 'POST', url: '/v1/sessions', payload: {} });
    assert.equal(res.statusCode, 201, res.body);
    const id = res.json().id as string;
    const address = await guestAddress(orch.names, id);
    assert.notEqual(address, first.guest);
    assert.equal(address, new AddressPool(TEST_SUBNET).describe(1).guest);
    const shot = await orch.server.inject({ method: 'GET', url: `/v1/sessions/${id}/screenshot` });
    assert.equal(shot.statusCode, 200);
    await orch.server.inject({ method: 'DELETE', url: `/v1/sessions/${id}` });
    assert.equal(orch.manager.leasesInUse, 0, 'the skipped block was not kept either');
  });
});
