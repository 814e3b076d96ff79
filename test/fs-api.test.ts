import assert from 'node:assert/strict';
import { setTimeout as sleep } from 'node:timers/promises';
import type { AddressInfo } from 'node:net';
import { after, before, describe, it } from 'node:test';
import { serverSentEvents } from '../src/client/event-stream.js';
import { MAX_LIST_ENTRIES } from '../src/files/fs-calls.js';
import { startTestOrchestrator, type TestOrchestrator } from './helpers/orchestrator.js';

interface Entry {
  name: string;
  path: string;
  type: string;
  size: number;
  mode: string;
  mtime: string;
  target?: string;
}

/** The filesystem calls on a real sandbox (issue 24): list, stat, mkdir, move, remove, watch. */
describe('filesystem calls in a real sandbox', { timeout: 300_000 }, () => {
  let orch: TestOrchestrator;
  let base: string;
  let id: string;

  before(async () => {
    orch = await startTestOrchestrator({}, true);
    base = `http://127.0.0.1:${(orch.server.server.address() as AddressInfo).port}`;
    const created = await fetch(`${base}/v1/sessions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ timeoutSeconds: 600 }),
    });
    assert.equal(created.status, 201, await created.clone().text());
    id = ((await created.json()) as { id: string }).id;
  });
  after(async () => {
    orch?.server.server.closeAllConnections();
    await orch?.stop();
  });

  const fs = (call: string, query?: Record<string, string>) => `${base}/v1/sessions/${id}/fs/${call}${query ? `?${new URLSearchParams(query)}` : ''}`;
  const post = (call: string, body: unknown) =>
    fetch(fs(call), { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
  const bash = async (command: string) => {
    const response = await fetch(`${base}/v1/sessions/${id}/tools/bash`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ command }),
    });
    assert.equal(response.status, 200);
    return ((await response.json()) as { content: Array<{ text?: string }> }).content.map((c) => c.text ?? '').join('');
  };
  const errorOf = async (response: Response) => ((await response.json()) as { error: { code: string; message: string } }).error;

  it('mkdir -p, stat, list with a depth, as the sandbox user', async () => {
    const made = await post('mkdir', { path: '/home/user/tree/a/b' });
    assert.equal(made.status, 201, await made.clone().text());
    assert.equal(((await made.json()) as Entry).type, 'dir');
    assert.equal((await post('mkdir', { path: '/home/user/tree/a/b' })).status, 201, 'an existing directory is fine');
    await bash('printf 12345 > /home/user/tree/a/five.txt; chmod 600 /home/user/tree/a/five.txt; ln -s five.txt /home/user/tree/a/link');
    const stat = (await (await fetch(fs('stat', { path: '/home/user/tree/a/five.txt' }))).json()) as Entry;
    assert.deepEqual({ type: stat.type, size: stat.size, mode: stat.mode }, { type: 'file', size: 5, mode: '0600' });
    assert.ok(Math.abs(Date.parse(stat.mtime) - Date.now()) < 60_000);
    const link = (await (await fetch(fs('stat', { path: '/home/user/tree/a/link' }))).json()) as Entry;
    assert.deepEqual({ type: link.type, target: link.target }, { type: 'symlink', target: 'five.txt' });
    const one = (await (await fetch(fs('list', { path: '/home/user/tree' }))).json()) as { entries: Entry[]; truncated: boolean };
    assert.deepEqual(
      one.entries.map((e) => e.name),
      ['a'],
    );
    const deep = (await (await fetch(fs('list', { path: '/home/user/tree', depth: '3' }))).json()) as { entries: Entry[] };
    assert.deepEqual(deep.entries.map((e) => e.path).sort(), [
      '/home/user/tree/a',
      '/home/user/tree/a/b',
      '/home/user/tree/a/five.txt',
      '/home/user/tree/a/link',
    ]);
    const denied = await fetch(fs('list', { path: '/root' }));
    assert.equal(denied.status, 403);
    const missing = await fetch(fs('stat', { path: '/home/user/nope' }));
    assert.equal(missing.status, 404);
    assert.equal((await errorOf(missing)).code, 'file_not_found');
  });

  it(`bounds a listing at ${MAX_LIST_ENTRIES} entries`, async () => {
    await bash(`mkdir -p /home/user/many && cd /home/user/many && seq 1 ${MAX_LIST_ENTRIES + 50} | xargs touch`);
    const listing = (await (await fetch(fs('list', { path: '/home/user/many' }))).json()) as { entries: Entry[]; truncated: boolean };
    assert.equal(listing.entries.length, MAX_LIST_ENTRIES);
    assert.equal(listing.truncated, true);
  });

  it('move (no overwrite unless asked) and remove (recursive only with the flag)', async () => {
    await bash('mkdir -p /home/user/mv && echo one > /home/user/mv/one && echo two > /home/user/mv/two');
    const clash = await post('move', { from: '/home/user/mv/one', to: '/home/user/mv/two' });
    assert.equal(clash.status, 409);
    assert.equal((await errorOf(clash)).code, 'already_exists');
    const moved = await post('move', { from: '/home/user/mv/one', to: '/home/user/mv/two', overwrite: true });
    assert.equal(moved.status, 200);
    assert.equal(await bash('cat /home/user/mv/two; ls /home/user/mv'), 'one\ntwo');
    const renamed = await post('move', { from: '/home/user/mv', to: '/home/user/moved' });
    assert.equal(((await renamed.json()) as Entry).type, 'dir');
    const notEmpty = await post('remove', { path: '/home/user/moved' });
    assert.equal(notEmpty.status, 409);
    assert.equal((await errorOf(notEmpty)).code, 'directory_not_empty');
    assert.equal((await post('remove', { path: '/home/user/moved/two' })).status, 204);
    assert.equal((await post('remove', { path: '/home/user/moved' })).status, 204, 'an empty directory goes without the flag');
    await bash('mkdir -p /home/user/full/x/y && touch /home/user/full/x/y/z');
    assert.equal((await post('remove', { path: '/home/user/full', recursive: true })).status, 204);
    assert.equal((await fetch(fs('stat', { path: '/home/user/full' }))).status, 404);
  });

  it('red team: paths are data, every field is checked', async () => {
    // One path component (no slash): the commands in it would run in the home directory.
    const odd = "/home/user/odd; touch pwned1 '$(touch pwned2)' `touch pwned3` -rf ~";
    assert.equal((await post('mkdir', { path: `${odd}/inner` })).status, 201);
    const listed = (await (await fetch(fs('list', { path: '/home/user' }))).json()) as { entries: Entry[] };
    assert.ok(
      listed.entries.some((e) => e.path === odd),
      JSON.stringify(listed.entries.map((e) => e.name)),
    );
    await bash('mkdir -p /home/user/keep && touch /home/user/keep/file');
    // A recursive remove runs rm: the path is one quoted argument after --, nothing else.
    assert.equal((await post('remove', { path: odd, recursive: true })).status, 204);
    assert.equal(await bash('ls /tmp /home/user | grep -c pwned; ls /home/user/keep'), '0\nfile');
    const cases: Array<[string, 'GET' | 'POST', unknown, string]> = [
      ['list?path=relative', 'GET', undefined, 'path'],
      ['list?path=%2Ftmp&depth=9', 'GET', undefined, 'depth'],
      ['stat?path=%2Ftmp%00x', 'GET', undefined, 'path'],
      ['mkdir', 'POST', { path: 'tmp/x' }, 'path'],
      ['mkdir', 'POST', { path: '/tmp/x', mode: '0999' }, 'mode'],
      ['move', 'POST', { from: '/tmp/a', to: 'b' }, 'to'],
      ['move', 'POST', { from: '/tmp/a', to: '/tmp/b', overwrite: 'yes' }, 'overwrite'],
      ['remove', 'POST', { path: '/tmp/a', recursive: 1 }, 'recursive'],
      ['remove', 'POST', { path: '/tmp/a', force: true }, 'force'],
      ['remove', 'POST', { path: '/', recursive: true }, 'path'],
    ];
    for (const [call, method, body, field] of cases) {
      const response = await fetch(`${base}/v1/sessions/${id}/fs/${call}`, {
        method,
        ...(body === undefined ? {} : { headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) }),
      });
      assert.equal(response.status, 400, `${call} ${JSON.stringify(body)}`);
      const error = await errorOf(response);
      assert.ok(error.message.includes(field), `${call}: "${error.message}" names ${field}`);
    }
  });

  it('a watch sees a file the bash tool creates, changes and removes', async () => {
    await post('mkdir', { path: '/home/user/watched' });
    const controller = new AbortController();
    const response = await fetch(fs('watch', { path: '/home/user/watched' }), { signal: controller.signal });
    assert.equal(response.status, 200);
    const events = serverSentEvents(response.body);
    const next = async () => {
      const { value } = await events.next();
      return { event: value?.event, entry: JSON.parse(value?.data ?? '{}') as Entry };
    };
    const ready = await next();
    assert.equal(ready.event, 'ready');
    // The image has inotifywait: the guest's kernel says when to look, no polling.
    assert.equal((ready.entry as unknown as { via: string }).via, 'inotify');
    const began = performance.now();
    await bash('echo hello > /home/user/watched/new.txt');
    const created = await next();
    console.log(`the watch saw the bash tool's file after ${(performance.now() - began).toFixed(0)} ms`);
    assert.deepEqual({ event: created.event, name: created.entry.name, size: created.entry.size }, { event: 'created', name: 'new.txt', size: 6 });
    await bash('echo more >> /home/user/watched/new.txt');
    const modified = await next();
    assert.deepEqual({ event: modified.event, size: modified.entry.size }, { event: 'modified', size: 11 });
    await bash('rm /home/user/watched/new.txt');
    assert.equal((await next()).event, 'removed');
    controller.abort();
    const notDir = await fetch(fs('watch', { path: '/home/user/nope' }));
    assert.equal(notDir.status, 404);
  });

  it('red team: watches whose client leaves while they start leave nothing behind', async () => {
    await post('mkdir', { path: '/home/user/left' });
    // 30 clients gone 0 to 87 ms after asking: before, during and after the watch's setup.
    await Promise.all(
      Array.from({ length: 30 }, async (_, i) => {
        const controller = new AbortController();
        setTimeout(() => controller.abort(), i * 3);
        await fetch(fs('watch', { path: '/home/user/left' }), { signal: controller.signal })
          .then((response) => response.body?.cancel())
          .catch(() => undefined);
      }),
    );
    // Past the setup's bound; then an event: an inotifywait whose channel was closed dies writing it.
    await sleep(6_000);
    await bash('touch /home/user/left/a; sleep 0.3; touch /home/user/left/b; sleep 1');
    // (This directory's only: the watch of the test before ended without an event to end its inotifywait.)
    const left = (await bash("pgrep -c -f 'inotifywai[t] .*/home/user/left' || true")).trim();
    console.log(`30 watches abandoned while starting: ${left} inotifywait left in the guest`);
    assert.equal(left, '0', 'a watch nobody reads still runs');
  });
});
