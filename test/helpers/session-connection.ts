import assert from 'node:assert/strict';
import { after, before } from 'node:test';
import type { GuestTransport } from '../../src/transport/index.js';
import { startTestOrchestrator, type TestOrchestrator } from './orchestrator.js';

/**
 * For a describe block: an orchestrator of its own with one session (10 minutes), started
 * before its tests and stopped after them; the getter gives that session's SSH connection.
 */
export function sessionConnection(): () => GuestTransport {
  let orch: TestOrchestrator | undefined;
  let connection: GuestTransport | undefined;
  before(async () => {
    orch = await startTestOrchestrator();
    const res = await orch.server.inject({ method: 'POST', url: '/v1/sessions', payload: { timeoutSeconds: 600 } });
    assert.equal(res.statusCode, 201, res.body);
    connection = orch.manager.connection(res.json().id as string);
  });
  after(async () => {
    await orch?.stop();
  });
  return () => {
    if (!connection) throw new Error('the session is not up (before() has not run)');
    return connection;
  };
}
