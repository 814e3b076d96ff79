/**
 * A cluster's node answers its gateways only (issue 22; docs/cluster.md): the node side of the
 * gateway protocol, on the real auth hook and key store, with fastify's inject.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import Fastify, { type FastifyInstance, type FastifyRequest } from 'fastify';
import { NotFoundError } from '../../src/errors.js';
import { EnvdTokenError } from '../../src/e2b/errors.js';
import { errorHandler } from '../../src/api/errors.js';
import { KeyRequirement } from '../../src/api/auth/key-requirement.js';
import { KeyStore } from '../../src/api/auth/key-store.js';
import { installAuth } from '../../src/api/auth/request-identity.js';
import { SessionStore } from '../../src/sessions/store.js';

const SECRET = 's'.repeat(40);

async function app(cluster: boolean): Promise<{ app: FastifyInstance; key: string; close(): Promise<void> }> {
  const store = new SessionStore(':memory:');
  const keys = new KeyStore(store.database);
  const { key } = keys.create('alice');
  const server = Fastify();
  server.setErrorHandler(errorHandler);
  // The envd check as envdTokenCheck answers it: sandbox bbbbbbbbbb is carol's, its token "good".
  const envd = {
    verify(request: FastifyRequest): string {
      if ((request.params as { id?: string }).id !== 'bbbbbbbbbb') throw new NotFoundError('sandbox not found');
      if (request.headers['x-access-token'] !== 'good') throw new EnvdTokenError();
      return 'carol';
    },
  };
  installAuth(server, { keys, requirement: new KeyRequirement('required', keys), envd, ...(cluster ? { cluster: { secret: SECRET } } : {}) });
  server.get('/e2b/envd/:id/files', { config: { e2b: 'envd' } }, async (request) => ({ tenant: request.tenant }));
  server.get('/healthz', async () => 'ok');
  server.get('/v1/views/:token', async () => ({ page: true }));
  server.post('/v1/sessions', async (request) => ({ tenant: request.tenant, placed: request.placedSessionId }));
  server.get('/v1/sessions/:id', async (request) => ({ tenant: request.tenant, keyId: request.apiKeyId }));
  await server.ready();
  return {
    app: server,
    key,
    close: async () => {
      await server.close();
      store.close();
    },
  };
}

describe('a cluster node takes requests from its gateways only', () => {
  let node: Awaited<ReturnType<typeof app>>;
  let single: Awaited<ReturnType<typeof app>>;
  before(async () => {
    node = await app(true);
    single = await app(false);
  });
  after(async () => {
    await node.close();
    await single.close();
  });

  it('refuses a request without the cluster credential, even with a valid API key of its own store', async () => {
    for (const headers of [
      {},
      { authorization: `Bearer ${node.key}` },
      { 'x-sbx-cluster-secret': 'wrong', 'x-sbx-tenant': 'alice' },
      { 'x-sbx-tenant': 'alice' },
    ]) {
      const res = await node.app.inject({ method: 'GET', url: '/v1/sessions/abcdefghij', headers });
      assert.equal(res.statusCode, 401, JSON.stringify(headers));
      assert.equal(res.json().error.code, 'cluster_credential_required');
    }
  });

  it("an envd route (E2B's in-sandbox API) needs the sandbox's access token, and its sandbox must be the tenant's the gateway named", async () => {
    const envd = (tenant: string | undefined, token: string | undefined, id = 'bbbbbbbbbb') =>
      node.app.inject({
        method: 'GET',
        url: `/e2b/envd/${id}/files`,
        headers: { 'x-sbx-cluster-secret': SECRET, ...(tenant ? { 'x-sbx-tenant': tenant } : {}), ...(token ? { 'x-access-token': token } : {}) },
      });
    // Red team: a gateway authenticated alice for a route of her own session, and a header
    // named carol's sandbox: the gateway's tenant alone opens nothing of carol's.
    assert.equal((await envd('alice', undefined)).statusCode, 401);
    assert.equal((await envd('alice', 'good')).statusCode, 404, "carol's sandbox is not alice's, token or not");
    assert.equal((await envd('alice', 'good', 'aaaaaaaaaa')).statusCode, 404);
    const own = await envd('carol', 'good');
    assert.equal(own.statusCode, 200);
    assert.deepEqual(own.json(), { tenant: 'carol' });
    assert.deepEqual((await envd(undefined, 'good')).json(), { tenant: 'carol' }, 'with its token alone, as on a single host');
  });

  it('serves the tenant a gateway names, with the key id for the logs', async () => {
    const res = await node.app.inject({
      method: 'GET',
      url: '/v1/sessions/abcdefghij',
      headers: { 'x-sbx-cluster-secret': SECRET, 'x-sbx-tenant': 'bob', 'x-sbx-api-key-id': 'abcdefabcdef' },
    });
    assert.equal(res.statusCode, 200);
    assert.deepEqual(res.json(), { tenant: 'bob', keyId: 'abcdefabcdef' });
  });

  it('refuses a gateway request that names no tenant, or a malformed one', async () => {
    const none = await node.app.inject({ method: 'GET', url: '/v1/sessions/abcdefghij', headers: { 'x-sbx-cluster-secret': SECRET } });
    assert.equal(none.statusCode, 401);
    const bad = await node.app.inject({
      method: 'GET',
      url: '/v1/sessions/abcdefghij',
      headers: { 'x-sbx-cluster-secret': SECRET, 'x-sbx-tenant': 'Bad Tenant;' },
    });
    assert.equal(bad.statusCode, 401);
  });

  it('answers a bare liveness probe, and an open route only with the credential', async () => {
    assert.equal((await node.app.inject({ method: 'GET', url: '/healthz' })).statusCode, 200);
    assert.equal((await node.app.inject({ method: 'GET', url: '/v1/views/sometoken' })).statusCode, 401);
    assert.equal((await node.app.inject({ method: 'GET', url: '/v1/views/sometoken', headers: { 'x-sbx-cluster-secret': SECRET } })).statusCode, 200);
  });

  it('takes the placed session id from a gateway; a single host ignores the header', async () => {
    const placed = await node.app.inject({
      method: 'POST',
      url: '/v1/sessions',
      headers: { 'x-sbx-cluster-secret': SECRET, 'x-sbx-tenant': 'bob', 'x-sbx-session-id': 'abcdefghij' },
    });
    assert.deepEqual(placed.json(), { tenant: 'bob', placed: 'abcdefghij' });
    const ignored = await single.app.inject({
      method: 'POST',
      url: '/v1/sessions',
      headers: { authorization: `Bearer ${single.key}`, 'x-sbx-session-id': 'abcdefghij', 'x-sbx-tenant': 'bob', 'x-sbx-cluster-secret': SECRET },
    });
    assert.deepEqual(ignored.json(), { tenant: 'alice', placed: null });
  });
});
