/**
 * The pure parts of the E2B surface (src/e2b): the metadata filter, envd's path and user
 * semantics, the routing of envd calls, a stream's bounded event queue, the error mapping (ours
 * and Connect's codes), the settings, and the envd access tokens' store.
 */
import assert from 'node:assert/strict';
import type { IncomingMessage } from 'node:http';
import { describe, it } from 'node:test';
import Database from 'better-sqlite3';
import type { FastifyRequest } from 'fastify';
import { Code } from '@connectrpc/connect';
import { e2bFailure } from '../../src/e2b/errors.js';
import { checkUser, envdPath, envdRewriter } from '../../src/e2b/envd-access.js';
import { toConnectError } from '../../src/e2b/envd-connect.js';
import { fastPathFor } from '../../src/e2b/envd-stream.js';
import { EventQueue } from '../../src/e2b/event-queue.js';
import { E2bSandboxStore } from '../../src/e2b/sandbox-store.js';
import { e2bMetadata, parseMetadataFilter } from '../../src/e2b/sandbox-view.js';
import { e2bSettingsFromEnv } from '../../src/e2b/settings.js';
import { InvalidRequestError, NotFoundError, OrchestratorError } from '../../src/errors.js';

const fakeRequest = (headers: Record<string, string>, body?: Buffer) => ({ headers, body }) as unknown as FastifyRequest;
const incoming = (url: string, headers: Record<string, string>) => ({ url, headers }) as unknown as IncomingMessage;

describe('E2B surface: pure parts', () => {
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
    // A guest port's name with a header naming another sandbox: the port's request, not envd's.
    assert.equal(rewrite(incoming('/files?path=/etc/shadow', { host: '8080-abcdefghij.sbx.test', 'e2b-sandbox-id': 'bbbbbbbbbb' })), undefined);
    assert.equal(envdRewriter(undefined)(incoming('/x', { host: '49983-abcdefghij.sbx.test' })), undefined);
  });

  it('command streams: Start and Connect in the plain case are served straight; any other case is left to connect', () => {
    const post = (headers: Record<string, string>) => ({ method: 'POST', headers }) as unknown as IncomingMessage;
    const json = { 'content-type': 'application/connect+json' };
    assert.deepEqual(fastPathFor('/process.Process/Start', post(json))?.binary, false);
    assert.equal(fastPathFor('/process.Process/Connect', post({ 'content-type': 'application/connect+proto; charset=utf-8' }))?.binary, true);
    assert.equal(fastPathFor('/process.Process/Start', post({ ...json, 'connect-timeout-ms': '60000' }))?.timeoutMs, 60000);
    assert.equal(fastPathFor('/process.Process/Start', post({ ...json, 'connect-content-encoding': 'identity' }))?.binary, false);
    // Left to connect: another method, a unary content type, compression, a timeout it would refuse, not a POST, a prototype key.
    assert.equal(fastPathFor('/process.Process/List', post(json)), undefined);
    assert.equal(fastPathFor('/process.Process/Start', post({ 'content-type': 'application/json' })), undefined);
    assert.equal(fastPathFor('/process.Process/Start', post({ ...json, 'connect-content-encoding': 'gzip' })), undefined);
    assert.equal(fastPathFor('/process.Process/Start', post({ ...json, 'connect-timeout-ms': '12345678901' })), undefined);
    assert.equal(fastPathFor('/process.Process/Start', post({ ...json, 'connect-timeout-ms': '-1' })), undefined);
    assert.equal(fastPathFor('/process.Process/Start', { method: 'GET', headers: json } as unknown as IncomingMessage), undefined);
    assert.equal(fastPathFor('/__proto__', post(json)), undefined);
  });

  it("a stream's event queue: push says full past its size, drain calls back as the reader takes, an error ends it", async () => {
    const queue = new EventQueue<string>(10);
    assert.equal(queue.push('a', 6), true);
    assert.equal(queue.push('b', 6), false, 'over 10 bytes queued: the producer must wait');
    let drained = false;
    queue.onDrain(() => (drained = true));
    const reader = queue[Symbol.asyncIterator]();
    assert.equal((await reader.next()).value, 'a');
    assert.equal(drained, true, 'below its size once the reader took one');
    queue.push('c', 1);
    queue.end();
    assert.deepEqual([(await reader.next()).value, (await reader.next()).value, (await reader.next()).done], ['b', 'c', true]);
    const failing = new EventQueue<string>(10);
    failing.push('dropped');
    failing.end(new Error('evicted'));
    await assert.rejects(failing[Symbol.asyncIterator]().next(), /evicted/);
  });

  it("errors as Connect's: our codes keep their meaning, a 5xx says only its gist", () => {
    assert.equal(toConnectError(new NotFoundError('gone')).code, Code.NotFound);
    assert.equal(toConnectError(new NotFoundError('gone')).rawMessage, 'not_found: gone');
    assert.equal(toConnectError(new InvalidRequestError('x')).code, Code.InvalidArgument);
    assert.equal(toConnectError(new OrchestratorError('invalid_envd_token', 'x')).code, Code.Unauthenticated);
    assert.equal(toConnectError(new OrchestratorError('e2b_unsupported', 'x')).code, Code.Unimplemented);
    assert.equal(toConnectError(new Error('/secret/path')).rawMessage, 'internal: internal error');
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
