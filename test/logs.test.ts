import assert from 'node:assert/strict';
import { readFile } from 'node:fs/promises';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { CONFIG_FILES } from '../src/guest/contract.js';
import { createLogger } from '../src/logger.js';
import { CLIENT_KEY_FILE } from '../src/transport/ssh-keys.js';
import { startTestOrchestrator, type TestOrchestrator } from './helpers/orchestrator.js';

interface LogLine {
  level: number;
  msg: string;
  sessionId?: string;
  tenant?: string;
  keyId?: string;
  [field: string]: unknown;
}

describe('logs: session id and tenant on every line about a session; no keys, no typed text', () => {
  const raw: string[] = [];
  let orch: TestOrchestrator;
  let apiKey: string;
  let keyId: string;
  let sessionId: string;
  const privateKeys: string[] = [];
  const typed = 'Quokka-7731 walks past the zebra crossing';
  const command = 'echo wombat-4412-marker';

  before(async () => {
    // The production logger (its redaction included), at debug, into memory.
    const log = createLogger({ write: (line: string) => void raw.push(line) }, 'debug');
    orch = await startTestOrchestrator({}, false, undefined, log);
    const made = orch.keys.create('acme');
    apiKey = made.key;
    keyId = made.record.id;
    const headers = { authorization: `Bearer ${apiKey}` };

    const created = await orch.server.inject({ method: 'POST', url: '/v1/sessions', headers, payload: {} });
    assert.equal(created.statusCode, 201, created.body);
    sessionId = created.json().id;
    const sessionDir = path.join(orch.stateDir, sessionId);
    privateKeys.push(await readFile(path.join(sessionDir, CLIENT_KEY_FILE), 'utf8'));
    privateKeys.push(await readFile(path.join(sessionDir, 'config', CONFIG_FILES.hostKey), 'utf8'));

    const typedRes = await orch.server.inject({ method: 'POST', url: `/v1/sessions/${sessionId}/actions`, headers, payload: { action: 'type', text: typed } });
    assert.equal(typedRes.statusCode, 200, typedRes.body);
    const bash = await orch.server.inject({ method: 'POST', url: `/v1/sessions/${sessionId}/tools/bash`, headers, payload: { command } });
    assert.equal(bash.statusCode, 200, bash.body);
    assert.match(bash.json().content[0].text, /wombat-4412-marker/);
    assert.equal((await orch.server.inject({ method: 'DELETE', url: `/v1/sessions/${sessionId}`, headers })).statusCode, 200);
  });
  after(async () => {
    await orch?.stop();
  });

  const lines = (): LogLine[] => raw.map((l) => JSON.parse(l) as LogLine);

  it('every line that mentions the session carries sessionId and tenant', () => {
    const about = raw.filter((l) => l.includes(sessionId)).map((l) => JSON.parse(l) as LogLine);
    // The ready line (with the boot's steps on it), then a request line for each call.
    assert.ok(about.length >= 4, `lines about the session: ${about.length}\n${about.map((l) => JSON.stringify(l)).join('\n')}`);
    assert.ok(
      about.some((l) => (l as LogLine & { msg?: string; steps?: unknown }).msg === 'session ready' && typeof (l as { steps?: unknown }).steps === 'object'),
      'the ready line says where the create went',
    );
    for (const line of about) {
      assert.equal(line.sessionId, sessionId, JSON.stringify(line));
      assert.equal(line.tenant, 'acme', JSON.stringify(line));
    }
    // Among them: the session's ready line (the boot's steps on it) and a line per request to it.
    const messages = new Set(about.map((l) => l.msg));
    for (const msg of ['session ready', 'request completed']) assert.ok(messages.has(msg), `"${msg}" in ${[...messages].join(', ')}`);
  });

  it('request lines carry the tenant and the key id, and of typed text and commands only their length', () => {
    const requests = lines().filter((l) => l.msg === 'request completed');
    assert.equal(requests.length, 4);
    for (const line of requests) {
      assert.equal(line.tenant, 'acme');
      assert.equal(line.keyId, keyId);
    }
    const typeLine = requests.find((l) => l.action === 'type');
    assert.equal(typeLine?.textLength, typed.length);
    const bashLine = requests.find((l) => l.route === '/v1/sessions/:id/tools/bash');
    assert.equal(bashLine?.commandLength, command.length);
  });

  it('the typed text, the command, the API key and the private keys appear nowhere', () => {
    const all = raw.join('');
    // `sbx_<id of 12>_<secret of 43>`: the secret by position (it may hold `_` itself; cut at
    // its last `_`, a few characters of it were found in the log by chance, one run in many).
    const secret = apiKey.slice('sbx_'.length + 12 + 1);
    assert.equal(secret.length, 43);
    for (const [what, text] of [
      ['typed text', typed],
      ['typed text (a part)', 'Quokka-7731'],
      ['bash command', 'wombat-4412'],
      ['API key', apiKey],
      ['API key secret', secret],
    ] as const) {
      assert.equal(all.includes(text), false, `${what} is in the log`);
    }
    for (const pem of privateKeys) {
      // Every base64 line of the key body, not just the whole PEM.
      const body = pem.split('\n').filter((l) => l && !l.startsWith('-----'));
      assert.ok(body.length > 0);
      for (const chunk of body) assert.equal(all.includes(chunk), false, 'a private key line is in the log');
    }
  });
});
