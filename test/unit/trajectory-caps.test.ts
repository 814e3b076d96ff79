import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { existsSync } from 'node:fs';
import { mkdtemp, readdir, rm, stat } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { after, beforeEach, describe, it } from 'node:test';
import Database from 'better-sqlite3';
import { pino } from 'pino';
import { LinkTokens } from '../../src/api/links/link-tokens.js';
import { TrajectoryRecorder } from '../../src/sessions/trajectory/recorder.js';
import type { TrajectorySettings } from '../../src/sessions/trajectory/settings.js';
import { actionName, isTypingTool, storedInput } from '../../src/sessions/trajectory/step-input.js';
import { TrajectoryStore } from '../../src/sessions/trajectory/trajectory-store.js';

const KiB = 1024;
const png = (bytes: number) => ({ mediaType: 'image/png' as const, data: Buffer.alloc(bytes, 7) });

/** Bytes of the screenshot files under a trajectory dir: what is really on disk. */
async function bytesOnDisk(dir: string): Promise<number> {
  let total = 0;
  for (const session of await readdir(dir).catch(() => [] as string[])) {
    for (const file of await readdir(path.join(dir, session))) total += (await stat(path.join(dir, session, file))).size;
  }
  return total;
}

/**
 * The trajectory's caps, on the real recorder with SQLite and files in a temporary dir: a
 * hostile model that calls without end fills its own budget and no more, the total stays
 * under its cap by deleting the oldest ended trajectories first, and age prunes.
 */
describe('trajectory caps', () => {
  let dir: string;
  let db: Database.Database;
  const live = new Set<string>();
  const dirs: string[] = [];

  function recorder(settings: Partial<TrajectorySettings>): TrajectoryRecorder {
    return new TrajectoryRecorder({
      store: new TrajectoryStore(db),
      dir,
      settings: { retentionSeconds: 3600, maxSessionBytes: 1024 * KiB, maxTotalBytes: 4096 * KiB, maxSteps: 1000, ...settings },
      describe: () => undefined,
      isLive: (id) => live.has(id),
      log: pino({ level: 'silent' }),
    });
  }
  const begin = (r: TrajectoryRecorder, id: string, createdAt = new Date().toISOString()) => r.begin({ id, tenant: 't', createdAt }, false);
  const click = (r: TrajectoryRecorder, id: string, bytes: number) =>
    r.record({ sessionId: id, tool: 'computer', input: { action: 'left_click', coordinate: [1, 2] }, startedAt: Date.now(), durationMs: 5, image: png(bytes) });

  beforeEach(async () => {
    dir = await mkdtemp(path.join(os.tmpdir(), 'sbx-trajectory-'));
    dirs.push(dir);
    db = new Database(':memory:');
    live.clear();
  });
  after(async () => {
    for (const d of dirs) await rm(d, { recursive: true, force: true });
  });

  it('a session past its byte cap keeps its steps counted, not stored, and its files stay under the cap', async () => {
    const r = recorder({ maxSessionBytes: 200 * KiB });
    begin(r, 'aaaaaaaaaa');
    for (let k = 0; k < 40; k++) await click(r, 'aaaaaaaaaa', 20 * KiB);
    const row = r.get('aaaaaaaaaa')!;
    assert.ok(row.bytes <= 200 * KiB, `${row.bytes} bytes held`);
    assert.ok(row.droppedImages > 0 || row.droppedSteps > 0);
    assert.ok((await bytesOnDisk(dir)) <= 200 * KiB);
    assert.equal(row.steps + row.droppedSteps, 40, 'every call is counted');
  });

  it('a session past its step cap: later steps are counted in droppedSteps', async () => {
    const r = recorder({ maxSteps: 5 });
    begin(r, 'bbbbbbbbbb');
    for (let k = 0; k < 12; k++) await click(r, 'bbbbbbbbbb', 100);
    const row = r.get('bbbbbbbbbb')!;
    assert.deepEqual([row.steps, row.droppedSteps], [5, 7]);
    assert.deepEqual(
      r.steps('bbbbbbbbbb', 1, 100).map((s) => s.n),
      [1, 2, 3, 4, 5],
    );
  });

  it('over the total cap, the oldest ended trajectories go first; a live one is never deleted to make room', async () => {
    const r = recorder({ maxTotalBytes: 300 * KiB, maxSessionBytes: 1024 * KiB });
    const t0 = Date.now() - 10_000;
    for (const [k, id] of ['cccccccccc', 'dddddddddd', 'eeeeeeeeee'].entries()) {
      begin(r, id, new Date(t0 + k * 1000).toISOString());
      await click(r, id, 90 * KiB);
    }
    live.add('dddddddddd');
    begin(r, 'ffffffffff', new Date(t0 + 5000).toISOString());
    await click(r, 'ffffffffff', 90 * KiB); // 4 x 90 KiB > 300 KiB: the oldest ended (c) goes
    assert.equal(r.get('cccccccccc'), undefined);
    assert.equal(existsSync(path.join(dir, 'cccccccccc')), false);
    assert.ok(r.get('dddddddddd') && r.get('eeeeeeeeee') && r.get('ffffffffff'));
    live.add('eeeeeeeeee');
    live.add('ffffffffff');
    await click(r, 'ffffffffff', 90 * KiB); // nothing ended left to delete: the screenshot is dropped, not stored
    assert.equal(r.get('ffffffffff')!.droppedImages, 1);
    assert.ok((await bytesOnDisk(dir)) <= 300 * KiB);
  });

  it('prunes trajectories past their retention, ended ones only', async () => {
    const r = recorder({ retentionSeconds: 60 });
    begin(r, 'gggggggggg', new Date(Date.now() - 120_000).toISOString());
    begin(r, 'hhhhhhhhhh', new Date(Date.now() - 120_000).toISOString());
    begin(r, 'iiiiiiiiii');
    live.add('hhhhhhhhhh');
    await click(r, 'gggggggggg', 100);
    assert.equal(await r.prune(), 1);
    assert.equal(r.get('gggggggggg'), undefined);
    assert.equal(existsSync(path.join(dir, 'gggggggggg')), false);
    assert.ok(r.get('hhhhhhhhhh') && r.get('iiiiiiiiii'));
  });

  it("keeps a step's screenshot as the next one's before, but never a zoom's magnified region", async () => {
    const r = recorder({});
    begin(r, 'jjjjjjjjjj');
    await click(r, 'jjjjjjjjjj', 100);
    await r.record({
      sessionId: 'jjjjjjjjjj',
      tool: 'computer',
      input: { action: 'zoom', region: [0, 0, 10, 10] },
      startedAt: Date.now(),
      durationMs: 5,
      image: png(50),
    });
    await click(r, 'jjjjjjjjjj', 100);
    const steps = r.steps('jjjjjjjjjj', 1, 10);
    assert.deepEqual(
      steps.map((s) => [s.n, s.afterImage, s.beforeStep]),
      [
        [1, 'image/png', null],
        [2, null, 1],
        [3, 'image/png', 1],
      ],
    );
    assert.equal((await r.image('jjjjjjjjjj', 1))?.data.length, 100);
  });

  it("masks typed text wherever a vendor's call or a desktop action puts it", () => {
    // OpenAI: one action, or a batch; key lists.
    assert.deepEqual(storedInput({ type: 'computer_call', action: { type: 'type', text: 'secret' } }, 'length', true), {
      type: 'computer_call',
      action: { type: 'type', textLength: 6 },
    });
    assert.deepEqual(
      storedInput(
        {
          actions: [
            { type: 'type', text: 'pw' },
            { type: 'keypress', keys: ['CTRL', 'A'] },
          ],
        },
        'length',
        true,
      ),
      {
        actions: [
          { type: 'type', textLength: 2 },
          { type: 'keypress', keysLength: 6 },
        ],
      },
    );
    // Gemini: args.text and args.keys.
    assert.deepEqual(storedInput({ name: 'type_text_at', args: { x: 1, y: 2, text: 'hunter2', press_enter: true } }, 'length', true), {
      name: 'type_text_at',
      args: { x: 1, y: 2, textLength: 7, press_enter: true },
    });
    assert.deepEqual(storedInput({ name: 'key_combination', args: { keys: 'Control+A' } }, 'length', true), {
      name: 'key_combination',
      args: { keysLength: 9 },
    });
    // Typed text too deep to look at, or of an odd shape, is dropped, never kept.
    const odd = JSON.stringify(storedInput({ action: { text: { nested: 'hunter2' } }, a: { b: { c: { text: 'hunter3' } } } }, 'length', true));
    assert.ok(!odd.includes('hunter2') && !odd.includes('hunter3'), odd);
    // Kept when the session opted in; never masked for a tool that types nothing (bash).
    assert.deepEqual(storedInput({ args: { text: 'x' } }, 'keep', true), { args: { text: 'x' } });
    assert.deepEqual(storedInput({ command: 'echo', text: 'x' }, 'length', false), { command: 'echo', text: 'x' });
    for (const tool of ['computer', 'actions', 'desktop', 'openai-computer', 'gemini-computer']) assert.ok(isTypingTool(tool), tool);
    assert.ok(!isTypingTool('bash'));
    assert.equal(actionName({ action: { type: 'double_click' } }, 'openai-computer'), 'double_click');
    assert.equal(actionName({ actions: [] }, 'openai-computer'), 'batch');
    assert.equal(actionName({ name: 'type_text_at' }, 'gemini-computer'), 'type_text_at');
    assert.equal(actionName({ action: 'set_clipboard' }, 'desktop'), 'set_clipboard');
  });

  it('stores typed text and key sequences as their length unless kept, and cuts long strings', () => {
    assert.deepEqual(storedInput({ action: 'type', text: 'secret' }, 'length', true), { action: 'type', textLength: 6 });
    assert.deepEqual(storedInput({ action: 'key', text: 'ctrl+a' }, 'length', true), { action: 'key', textLength: 6 });
    assert.deepEqual(storedInput({ action: 'type', text: 'secret' }, 'keep', true), { action: 'type', text: 'secret' });
    const long = storedInput({ command: 'x'.repeat(100_000) }, 'length', false);
    assert.ok(String(long.command).length < 9 * KiB);
    assert.match(String(long.command), /more characters not stored/);
  });
});

describe('link tokens', () => {
  const db = new Database(':memory:');
  const links = new LinkTokens(db);

  it('open their own session and purpose until they expire or are revoked; only a hash is stored', () => {
    const { record, token } = links.create('t', 'aaaaaaaaaa', 'trajectory', 60);
    assert.equal(links.verify(token, 'aaaaaaaaaa', 'trajectory').tenant, 't');
    assert.throws(() => links.verify(token, 'bbbbbbbbbb', 'trajectory'), { code: 'invalid_link_token' });
    assert.throws(() => links.verify(`${token.slice(0, -1)}${token.endsWith('A') ? 'B' : 'A'}`, 'aaaaaaaaaa', 'trajectory'), { code: 'invalid_link_token' });
    assert.throws(() => links.verify(token, 'aaaaaaaaaa', 'trajectory', new Date(Date.now() + 61_000)), { code: 'expired_link_token' });
    // The secret, in every form it could be stored in, is nowhere in the database's bytes
    // (the whole file as SQLite writes it: a BLOB column is compared as bytes, not as JSON),
    // and the row holds exactly its SHA-256.
    // `lnk_<12 id chars>_<secret>`: both parts may hold '_' themselves, so the secret is cut by position.
    const secret = token.slice('lnk_'.length + 12 + 1);
    assert.equal(secret.length, 43);
    const file = db.serialize();
    for (const form of [Buffer.from(secret), Buffer.from(secret, 'base64url'), Buffer.from(Buffer.from(secret, 'base64url').toString('hex'))]) {
      assert.equal(file.indexOf(form), -1, `the secret (${form.length} bytes) is not in the database`);
    }
    const stored = db.prepare('SELECT hash FROM link_tokens WHERE id = ?').get(record.id) as { hash: Buffer };
    assert.ok(Buffer.isBuffer(stored.hash), 'the hash is stored as bytes');
    assert.deepEqual(stored.hash, createHash('sha256').update(secret).digest(), 'the row holds the SHA-256 of the secret');
    assert.notEqual(file.indexOf(stored.hash), -1, 'the search above looks at the bytes where the hash is (it would find a stored secret)');
    assert.equal(links.revoke('other-tenant', 'aaaaaaaaaa', record.id), false);
    assert.equal(links.revoke('t', 'aaaaaaaaaa', record.id), true);
    assert.throws(() => links.verify(token, 'aaaaaaaaaa', 'trajectory'), { code: 'revoked_link_token' });
  });
});
