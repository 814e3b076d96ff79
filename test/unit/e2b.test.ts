/**
 * The pure parts of the E2B surface (src/e2b): the multipart splitter, the metadata filter,
 * envd's path and user semantics, the routing of envd calls, the Connect envelope, the error
 * mapping, the settings, and the envd access tokens' store.
 */
import assert from 'node:assert/strict';
import type { IncomingMessage } from 'node:http';
import { describe, it } from 'node:test';
import Database from 'better-sqlite3';
import type { FastifyRequest } from 'fastify';
import { requestMessage } from '../../src/e2b/connect-protocol.js';
import { e2bFailure } from '../../src/e2b/errors.js';
import { checkUser, envdPath, envdRewriter } from '../../src/e2b/envd-access.js';
import { multipartBoundary, parseMultipart } from '../../src/e2b/multipart.js';
import { E2bSandboxStore } from '../../src/e2b/sandbox-store.js';
import { e2bMetadata, parseMetadataFilter } from '../../src/e2b/sandbox-view.js';
import { e2bSettingsFromEnv } from '../../src/e2b/settings.js';
import { InvalidRequestError, NotFoundError, OrchestratorError } from '../../src/errors.js';

const fakeRequest = (headers: Record<string, string>, body?: Buffer) => ({ headers, body }) as unknown as FastifyRequest;
const incoming = (url: string, headers: Record<string, string>) => ({ url, headers }) as unknown as IncomingMessage;

describe('E2B surface: pure parts', () => {
  it('multipart: parts with names and filenames, bytes kept as they are; malformed bodies are 400s', () => {
    const boundary = multipartBoundary('multipart/form-data; boundary=----abc123');
    assert.equal(boundary, '----abc123');
    assert.equal(multipartBoundary('application/json'), undefined);
    const body = Buffer.concat([
      Buffer.from('------abc123\r\nContent-Disposition: form-data; name="file"; filename="/home/user/a.txt"\r\nContent-Type: application/octet-stream\r\n\r\n'),
      Buffer.from([0, 1, 2, 13, 10, 45, 45]),
      Buffer.from('\r\n------abc123\r\nContent-Disposition: form-data; name="file"; filename="b.txt"\r\n\r\nsecond\r\n------abc123--\r\n'),
    ]);
    const parts = parseMultipart(body, '----abc123');
    assert.deepEqual(
      parts.map((p) => [p.name, p.filename, [...p.data]]),
      [
        ['file', '/home/user/a.txt', [0, 1, 2, 13, 10, 45, 45]],
        ['file', 'b.txt', [...Buffer.from('second')]],
      ],
    );
    assert.throws(() => parseMultipart(Buffer.from('no boundary here'), 'x'), InvalidRequestError);
    assert.throws(() => parseMultipart(Buffer.from('--x\r\nContent-Disposition: form-data; name="a"\r\n\r\nno end'), 'x'), InvalidRequestError);
  });

  it("metadata: the SDK's doubly encoded filter, and ours shown as strings", () => {
    const sdk = new URLSearchParams({ [encodeURIComponent('a b')]: encodeURIComponent('x&y=z') }).toString();
    assert.deepEqual(parseMetadataFilter(sdk), [['a b', 'x&y=z']]);
    assert.deepEqual(parseMetadataFilter(undefined), []);
    assert.deepEqual(e2bMetadata({ s: 'v', n: 1, o: { k: true } }), { s: 'v', n: '1', o: '{"k":true}' });
  });

  it("envd paths: relative from the user's home, ~ for it, normalised; NUL and empty refused", () => {
    assert.equal(envdPath('notes/a.txt'), '/home/user/notes/a.txt');
    assert.equal(envdPath('~/x/'), '/home/user/x');
    assert.equal(envdPath('~'), '/home/user');
    assert.equal(envdPath('/etc/../tmp/./f'), '/tmp/f');
    assert.throws(() => envdPath(''), OrchestratorError);
    assert.throws(() => envdPath('a\0b'), InvalidRequestError);
    assert.throws(() => envdPath(42), OrchestratorError);
  });

  it('users: the guest user or none; root and others refused, from Basic auth or the query', () => {
    const basic = (user: string) => fakeRequest({ authorization: `Basic ${Buffer.from(`${user}:`).toString('base64')}` });
    checkUser(basic('user'));
    checkUser(fakeRequest({}));
    checkUser(fakeRequest({}), 'user');
    assert.throws(() => checkUser(basic('root')), /never as "root"/);
    assert.throws(() => checkUser(fakeRequest({}), 'root'), /never as "root"/);
  });

  it('routing: envd paths by the E2b-Sandbox-Id header, every path by the 49983 host form, nothing else', () => {
    const rewrite = envdRewriter('sbx.test');
    assert.equal(rewrite(incoming('/process.Process/Start', { 'e2b-sandbox-id': 'abcdefghij' })), '/e2b/envd/abcdefghij/process.Process/Start');
    assert.equal(rewrite(incoming('/files?path=a', { 'e2b-sandbox-id': 'abcdefghij' })), '/e2b/envd/abcdefghij/files?path=a');
    assert.equal(rewrite(incoming('/v1/sessions', { 'e2b-sandbox-id': 'abcdefghij' })), undefined, 'our API is not envd');
    assert.equal(rewrite(incoming('/health', { 'e2b-sandbox-id': '../../v1' })), '/e2b/envd/0000000000/health', 'an id of another shape is a made-up one');
    assert.equal(rewrite(incoming('/anything', { host: '49983-abcdefghij.sbx.test:8080' })), '/e2b/envd/abcdefghij/anything');
    assert.equal(rewrite(incoming('/anything', { host: '3000-abcdefghij.sbx.test' })), undefined, 'other ports are the port routes');
    assert.equal(envdRewriter(undefined)(incoming('/x', { host: '49983-abcdefghij.sbx.test' })), undefined);
  });

  it('Connect: one JSON message, enveloped on streams; anything else is a 400', () => {
    const envelope = (json: string, flags = 0) => {
      const head = Buffer.alloc(5);
      head.writeUInt8(flags, 0);
      head.writeUInt32BE(Buffer.byteLength(json), 1);
      return Buffer.concat([head, Buffer.from(json)]);
    };
    assert.deepEqual(requestMessage(fakeRequest({ 'content-type': 'application/json' }, Buffer.from('{"path":"/"}'))), { path: '/' });
    assert.deepEqual(requestMessage(fakeRequest({ 'content-type': 'application/connect+json' }, envelope('{"a":1}'))), { a: 1 });
    assert.deepEqual(requestMessage(fakeRequest({ 'content-type': 'application/json' }, Buffer.alloc(0))), {});
    assert.throws(() => requestMessage(fakeRequest({ 'content-type': 'application/connect+json' }, envelope('{"a":1}', 1))), InvalidRequestError);
    assert.throws(
      () => requestMessage(fakeRequest({ 'content-type': 'application/connect+json' }, Buffer.concat([envelope('{}'), envelope('{}')]))),
      InvalidRequestError,
    );
    assert.throws(() => requestMessage(fakeRequest({ 'content-type': 'application/json' }, Buffer.from('[1]'))), InvalidRequestError);
    assert.throws(() => requestMessage(fakeRequest({ 'content-type': 'application/json' }, Buffer.from('{'))), InvalidRequestError);
  });

  it("errors: our codes keep their status and map to Connect's codes; fastify's body cap is resource_exhausted", () => {
    assert.deepEqual(e2bFailure(new NotFoundError('gone')), { status: 404, connectCode: 'not_found', message: 'not_found: gone', code: 'not_found' });
    assert.equal(e2bFailure(new InvalidRequestError('x')).connectCode, 'invalid_argument');
    assert.equal(e2bFailure(new OrchestratorError('already_exists', 'x')).connectCode, 'already_exists');
    assert.equal(e2bFailure(new OrchestratorError('invalid_envd_token', 'x')).connectCode, 'unauthenticated');
    assert.equal(e2bFailure(Object.assign(new Error('too big'), { statusCode: 413 })).connectCode, 'resource_exhausted');
    const internal = e2bFailure(new Error('/secret/host/path failed'));
    assert.equal(internal.status, 500);
    assert.doesNotMatch(internal.message, /secret/);
  });

  it('settings: base and desktop by default, more by SBX_E2B_TEMPLATES, bad values named', () => {
    assert.deepEqual(
      [...e2bSettingsFromEnv({}).templates],
      [
        ['base', 'minimal'],
        ['desktop', 'xfce'],
      ],
    );
    assert.equal(e2bSettingsFromEnv({ SBX_E2B_DESKTOP_TEMPLATE: 'desktop' }).templates.get('desktop'), 'desktop');
    const set = e2bSettingsFromEnv({ SBX_E2B_DESKTOP_TEMPLATE: 'xfce', SBX_E2B_TEMPLATES: 'code-interpreter-v1=python, my=minimal' });
    assert.equal(set.templates.get('desktop'), 'xfce');
    assert.equal(set.templates.get('code-interpreter-v1'), 'python');
    assert.equal(set.templates.get('my'), 'minimal');
    assert.throws(() => e2bSettingsFromEnv({ SBX_E2B_TEMPLATES: 'a=b=c' }), /SBX_E2B_TEMPLATES/);
    assert.throws(() => e2bSettingsFromEnv({ SBX_E2B_TEMPLATES: 'a=B C' }), /SBX_E2B_TEMPLATES/);
  });

  it('store: tokens kept as digests, several valid per sandbox, none for another; rows of ended sessions pruned', () => {
    const db = new Database(':memory:');
    const store = new E2bSandboxStore(db);
    const first = store.add({ sessionId: 'aaaaaaaaaa', tenant: 't', templateId: 'base', envVars: { A: '1' } });
    assert.match(first, /^eat_[A-Za-z0-9_-]{12}_[A-Za-z0-9_-]{43}$/);
    assert.ok(store.verify('aaaaaaaaaa', first));
    const second = store.issue('aaaaaaaaaa') as string;
    assert.ok(store.verify('aaaaaaaaaa', second) && store.verify('aaaaaaaaaa', first), 'a connect does not cut off the first client');
    assert.equal(store.issue('bbbbbbbbbb'), undefined);
    store.add({ sessionId: 'bbbbbbbbbb', tenant: 't', templateId: 'base', envVars: {} });
    assert.ok(!store.verify('bbbbbbbbbb', first), "one sandbox's token opens no other");
    assert.ok(!store.verify('aaaaaaaaaa', first.slice(0, -1) + (first.endsWith('A') ? 'B' : 'A')));
    assert.ok(!store.verify('aaaaaaaaaa', 'prt_aaaaaaaaaaaa_' + 'a'.repeat(43)), 'a port token is not an envd token');
    const raw = JSON.stringify(db.prepare('SELECT * FROM e2b_sandboxes').all());
    // The secret is the last 43 characters (base64url: an id or a secret may hold '_' itself).
    assert.ok(!raw.includes(first.slice(-43)), 'the secret is not stored');
    assert.deepEqual(store.get('aaaaaaaaaa')?.envVars, { A: '1' });
    store.prune((id) => id === 'bbbbbbbbbb');
    assert.equal(store.get('aaaaaaaaaa'), undefined);
    assert.ok(store.get('bbbbbbbbbb'));
  });
});
