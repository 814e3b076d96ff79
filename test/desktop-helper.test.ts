import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { once } from 'node:events';
import { copyFile, mkdtemp, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { after, before, describe, it } from 'node:test';
import { DESKTOP_HELPER_START_INTERVAL_MS } from '../src/computer/desktop-actions/desktop-actions.js';
import { ResourceNames } from '../src/network/names.js';
import type { GuestTransport } from '../src/transport/index.js';
import { connectToGuest, guestAddress, guestSh } from './helpers/guest.js';
import { cpuSecondsOf, percentile } from './helpers/host-cost.js';
import { TEST_PREFIX } from './helpers/orchestrator.js';
import { memoryOf } from './helpers/raw-http.js';
import { startServe, type ServeProcess } from './helpers/serve.js';

/**
 * Issue 21: the desktop actions' guest helper (sbx-desktopd) is one long-lived process per
 * session, as sbx-input is, not a Python start per action. Against a real `sbx serve` (its own
 * process, so its CPU and memory are its own) and real container sandboxes: the same helper
 * (the same guest pid) answers every action; a killed one is started again by the next action;
 * and a guest root that replaces it with one that never answers, or one that answers with
 * frames of 64 MiB, fails that session's action with a clear error, within a bounded
 * time, at a bounded cost to the orchestrator, while another session is served meanwhile; with
 * the helper back, the next action works.
 */
const NAMES = new ResourceNames(TEST_PREFIX);
const HELPER = '/usr/local/bin/sbx-desktopd';
/** The helpers of a session's guest, as their command line reads (ours, or one put in its place). */
const HELPER_PATTERN = `^/usr/bin/python3 -I ${HELPER}$`;
const MAX_GROWTH_MIB = 50;
/**
 * Orchestrator CPU per hostile answer beyond an honest action's: a frame of 64 MiB announced,
 * refused at its 8-byte header, the channel closed, what the flood had in flight (at most the
 * channel's 2 MiB window) decrypted and dropped, the 502 and its log line, a new channel for
 * the next. 0-4 ms measured (load 0.2-1.5 on 2 cores) against honest pairs at the same pace;
 * against unpaced ones it read 16-55 ms, the policy checks' `ip`/`nft` of ten idle seconds.
 * Compared as medians of rounds, in /proc's 10 ms ticks: 0-20 ms (a sum read 45 ms once in CI,
 * a burst of other work in it). Keeping the frames cost hundreds of ms an answer (64 MiB decrypted).
 */
const HOSTILE_ANSWER_CPU_MS = 50;
/** A screen request's answer time on a helper just started (8 s), and its start-up's (5 s): desktop-actions.ts. */
const SILENT_HELPER_FAILS_WITHIN_MS = 13_000;
type Json = Record<string, unknown>;

/** A path in a container sandbox's root as its init sees it (the guest's root can write there). */
async function guestRootPath(id: string, guestPath: string): Promise<string> {
  const { stdout } = await promisify(execFile)('runc', ['--root', NAMES.runcRoot, 'state', NAMES.container(id)]);
  return `/proc/${(JSON.parse(stdout) as { pid: number }).pid}/root${guestPath}`;
}

describe('the desktop helper: one process per session', () => {
  let stateDir: string;
  let serve: ServeProcess;
  const ids: string[] = [];
  let guest: GuestTransport;
  const pid = () => serve.child.pid as number;

  const call = async (method: string, id: string, route: string, body?: unknown) => {
    const response = await fetch(`${serve.url}/v1/sessions/${id}/desktop/${route}`, {
      method,
      ...(body === undefined ? {} : { headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) }),
    });
    return { status: response.status, body: (await response.json()) as Json };
  };

  const errorOf = (body: Json) => body.error as { code: string; message: string };
  /** The guest pids of the session's desktop helpers. */
  const helperPids = async (): Promise<number[]> => {
    const { text } = await guestSh(guest, `pgrep -f '${HELPER_PATTERN}' || true`);
    return text
      .split('\n')
      .filter(Boolean)
      .map(Number)
      .sort((a, b) => a - b);
  };
  /** Waits until the session runs exactly `count` helpers; returns their pids. */
  const helpersSettle = async (count: number): Promise<number[]> => {
    let pids: number[] = [];
    for (let i = 0; i < 100; i++) {
      pids = await helperPids();
      if (pids.length === count) return pids;
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
    assert.fail(`expected ${count} desktop helpers in the guest, found ${pids.length}: ${pids.join(' ')}`);
  };
  /** Replaces the victim's helper with `program` (as a guest root could) and stops the running one. */
  const replaceHelper = async (program: string): Promise<() => Promise<void>> => {
    const helper = await guestRootPath(ids[0] as string, HELPER);
    const saved = path.join(stateDir, `sbx-desktopd.saved`);
    await copyFile(helper, saved);
    await writeFile(helper, program);
    await guestSh(guest, `pkill -f '${HELPER_PATTERN}' || true`);
    await helpersSettle(0);
    return () => copyFile(saved, helper);
  };

  before(async () => {
    stateDir = await mkdtemp(path.join(os.tmpdir(), 'sbx-desktop-helper-'));
    serve = await startServe(stateDir, 19_400 + Math.floor(Math.random() * 100), undefined, [], { SBX_TENANT_REQUEST_LIMITS: 'local=1000/100000/100000' });
    for (let i = 0; i < 2; i++) {
      const response = await fetch(`${serve.url}/v1/sessions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{}' });
      const created = (await response.json()) as Json;
      assert.equal(response.status, 201, JSON.stringify(created));
      ids.push(created.id as string);
    }
    guest = await connectToGuest(stateDir, ids[0] as string, await guestAddress(NAMES, ids[0] as string));
  });

  after(async () => {
    guest?.close();
    if (serve && serve.child.exitCode === null) {
      serve.child.kill('SIGTERM');
      await once(serve.child, 'exit');
    }
    if (stateDir) await rm(stateDir, { recursive: true, force: true });
  });

  it('one helper answers every action of the session: the same guest pid throughout, one per session', { timeout: 60_000 }, async () => {
    const id = ids[0] as string;
    assert.equal((await call('GET', id, 'screen')).status, 200);
    const [pid] = await helpersSettle(1);
    // The minimal template's xterm (mapped a moment after the session is ready, on a busy host).
    let xterm: { id: number; app: string } | undefined;
    let windows: { status: number; body: Json } | undefined;
    for (let i = 0; i < 100 && !xterm; i++) {
      if (i > 0) await new Promise((resolve) => setTimeout(resolve, 100));
      windows = await call('GET', id, 'windows');
      assert.equal(windows.status, 200, JSON.stringify(windows.body));
      xterm = (windows.body.windows as Array<{ id: number; app: string }>).find((w) => w.app === 'XTerm');
    }
    assert.ok(xterm, `the minimal template's xterm is listed: ${JSON.stringify(windows?.body)}`);
    assert.equal((await call('POST', id, `windows/${xterm.id}/focus`)).status, 200);
    assert.equal((await call('PUT', id, 'clipboard', { text: 'kept by one helper: é' })).status, 200);
    assert.deepEqual((await call('GET', id, 'clipboard')).body, { text: 'kept by one helper: é' });
    for (let i = 0; i < 10; i++) assert.equal((await call('GET', id, 'screen')).status, 200);
    assert.deepEqual(await helperPids(), [pid], 'the same helper process answered every action');
    // The other session has its own, started by its own first action.
    assert.equal((await call('GET', ids[1] as string, 'screen')).status, 200);
    assert.deepEqual(await helperPids(), [pid], "the other session's helper is in its own guest");
  });

  it('a helper killed in the guest is started again by the next action, which works', { timeout: 60_000 }, async () => {
    const id = ids[0] as string;
    const [before] = await helpersSettle(1);
    await guestSh(guest, `kill -KILL ${before}`);
    await helpersSettle(0);
    const res = await call('GET', id, 'windows');
    assert.equal(res.status, 200, JSON.stringify(res.body));
    const [after] = await helpersSettle(1);
    assert.notEqual(after, before);
    assert.equal((await call('GET', id, 'screen')).status, 200);
    assert.deepEqual(await helperPids(), [after]);
  });

  it(
    'red team: a helper that never answers fails its action with a clear error in bounded time; another session is served meanwhile; the next action works',
    { timeout: 60_000 },
    async () => {
      const [victim, bystander] = ids as [string, string];
      // Reads every request and answers none; it ends when its stdin does.
      const restore = await replaceHelper('import sys\nfor line in sys.stdin:\n    pass\n');
      let res: { status: number; body: Json };
      let waitedMs: number;
      const served: number[] = [];
      const cpuBefore = await cpuSecondsOf(pid());
      try {
        const started = performance.now();
        const pending = call('GET', victim, 'screen').then((answer) => ((waitedMs = performance.now() - started), answer));
        // Meanwhile another session's actions are answered as usual.
        let done = false;
        void pending.finally(() => (done = true));
        while (!done) {
          const t = performance.now();
          assert.equal((await call('GET', bystander, 'screen')).status, 200);
          served.push(performance.now() - t);
          await new Promise((resolve) => setTimeout(resolve, 200));
        }
        res = await pending;
      } finally {
        await restore();
      }
      const cpuMs = ((await cpuSecondsOf(pid())) - cpuBefore) * 1000;
      console.log(
        `desktop-helper (silent helper): failed after ${waitedMs!.toFixed(0)} ms: ${JSON.stringify(res.body)}; ` +
          `meanwhile ${served.length} actions of another session, p50 ${percentile(served, 0.5).toFixed(1)} ms; orchestrator CPU ${cpuMs.toFixed(0)} ms in all`,
      );
      assert.equal(res.status, 502, JSON.stringify(res.body));
      assert.equal(errorOf(res.body).code, 'desktop_error');
      assert.match(errorOf(res.body).message, /desktop helper failed in the guest \(screen\): no answer within 13000 ms; the next action starts it again/);
      // 0.8-0.9 s past it in CI runs (a wall clock on a busy host: the message names the 13 s).
      assert.ok(
        waitedMs! >= SILENT_HELPER_FAILS_WITHIN_MS - 100 && waitedMs! < SILENT_HELPER_FAILS_WITHIN_MS + 6_000,
        `failed after ${waitedMs!.toFixed(0)} ms`,
      );
      assert.ok(served.length >= 10, `${served.length} actions of the other session answered meanwhile`);
      // The silent helper ended with its channel (its stdin ended); the helper back in place answers.
      await helpersSettle(0);
      const next = await call('GET', victim, 'screen');
      assert.equal(next.status, 200, JSON.stringify(next.body));
      await helpersSettle(1);
    },
  );

  it(
    'red team: a helper that answers with 64 MiB frames is refused at the frame header, at a bounded cost, each time; the next action works',
    { timeout: 90_000 },
    async () => {
      const [victim, bystander] = ids as [string, string];
      const rounds = 10;
      // The control: the same pairs of actions, both honest, at the pace the hostile ones go
      // (one helper start a second), so that what the orchestrator does meanwhile anyway (its
      // policy checks spawn `ip` and `nft` every few seconds) is in both and cancels out.
      // Each round's CPU is measured on its own and the medians compared: a sum counted the
      // one round that a burst of background work landed in (45 ms "per answer" once in CI,
      // 0-5 in other runs of the same code).
      const honestRoundsMs: number[] = [];
      const honestStarted = performance.now();
      for (let i = 0; i < rounds; i++) {
        const roundCpu = await cpuSecondsOf(pid());
        const [a, b] = await Promise.all([call('GET', victim, 'windows'), call('GET', bystander, 'screen')]);
        assert.deepEqual([a.status, b.status], [200, 200]);
        const nextAt = honestStarted + (i + 1) * DESKTOP_HELPER_START_INTERVAL_MS;
        await new Promise((resolve) => setTimeout(resolve, Math.max(0, nextAt - performance.now())));
        honestRoundsMs.push(((await cpuSecondsOf(pid())) - roundCpu) * 1000);
      }
      const honestCpuMs = honestRoundsMs.reduce((sum, ms) => sum + ms, 0);
      // Answers every request with a whole frame of 64 MiB (the cap is 256 KiB): sent in full,
      // as fast as the channel takes it. Kept, ten of them would be 640 MiB.
      const restore = await replaceHelper(
        'import struct, sys\nout = sys.stdout.buffer\nchunk = b"x" * 65536\nfor line in sys.stdin.buffer:\n' +
          "    out.write(b'SBXD' + struct.pack('>I', 64 << 20))\n    for _ in range(1024):\n        out.write(chunk)\n    out.flush()\n",
      );
      const baseline = await memoryOf(pid());
      const hostileRoundsMs: number[] = [];
      const started = performance.now();
      const refusals: string[] = [];
      try {
        let roundCpu = await cpuSecondsOf(pid());
        for (let i = 0; i < rounds; i++) {
          // The orchestrator paces helper starts (one a second): the pause is in the round's call.
          const [hostile, fine] = await Promise.all([call('GET', victim, 'windows'), call('GET', bystander, 'screen')]);
          assert.equal(hostile.status, 502, JSON.stringify(hostile.body));
          assert.equal(errorOf(hostile.body).code, 'guest_protocol_error');
          refusals.push(errorOf(hostile.body).message);
          assert.equal(fine.status, 200, JSON.stringify(fine.body));
          const roundEnd = await cpuSecondsOf(pid());
          hostileRoundsMs.push((roundEnd - roundCpu) * 1000);
          roundCpu = roundEnd;
        }
      } finally {
        await restore();
      }
      const wallMs = performance.now() - started;
      const cpuMs = hostileRoundsMs.reduce((sum, ms) => sum + ms, 0);
      const now = await memoryOf(pid());
      const perAnswer = Math.max(0, percentile(hostileRoundsMs, 0.5) - percentile(honestRoundsMs, 0.5));
      console.log(
        `desktop-helper (64 MiB frames): ${rounds} hostile answers and ${rounds} actions of another session in ${wallMs.toFixed(0)} ms cost ${cpuMs.toFixed(0)} ms of orchestrator CPU ` +
          `(the same ${rounds} pairs honest: ${honestCpuMs.toFixed(0)} ms), ${perAnswer.toFixed(1)} ms per hostile answer beyond an honest one (medians of the rounds: ${percentile(hostileRoundsMs, 0.5).toFixed(0)} and ${percentile(honestRoundsMs, 0.5).toFixed(0)} ms); ` +
          `rss ${baseline.rssMiB} -> ${now.rssMiB} MiB, peak ${baseline.peakMiB} -> ${now.peakMiB} MiB (load average ${os.loadavg()[0]?.toFixed(1)})`,
      );
      assert.ok(now.peakMiB - baseline.peakMiB < MAX_GROWTH_MIB, `peak memory grew by ${now.peakMiB - baseline.peakMiB} MiB`);
      assert.ok(perAnswer < HOSTILE_ANSWER_CPU_MS, `${perAnswer.toFixed(1)} ms of orchestrator CPU per hostile answer`);
      // Refused at the header, naming the guest: nothing of the payload was kept.
      for (const message of refusals)
        assert.match(message, /the desktop helper in the guest sent an answer of 67108864 bytes, more than this request's answer can be \(262144\)/);
      // One helper a second at most, however fast the client asks.
      assert.ok(wallMs >= (rounds - 1) * DESKTOP_HELPER_START_INTERVAL_MS - 50, `${rounds} helpers started within ${wallMs.toFixed(0)} ms`);
      // Each flooder died with its channel; the helper back in place answers.
      await helpersSettle(0);
      const next = await call('GET', victim, 'windows');
      assert.equal(next.status, 200, JSON.stringify(next.body));
    },
  );

  it('latency and orchestrator CPU per action (50 screen and 50 window-list actions; reported)', async () => {
    const id = ids[0] as string;
    assert.equal((await call('GET', id, 'screen')).status, 200); // the helper's start, if it has one
    for (const route of ['screen', 'windows']) {
      const times: number[] = [];
      const cpuBefore = await cpuSecondsOf(pid());
      for (let i = 0; i < 50; i++) {
        const started = performance.now();
        const res = await call('GET', id, route);
        times.push(performance.now() - started);
        assert.equal(res.status, 200, JSON.stringify(res.body));
      }
      const cpuMs = ((await cpuSecondsOf(pid())) - cpuBefore) * 1000;
      console.log(
        `desktop-helper: GET .../desktop/${route} x50: p50 ${percentile(times, 0.5).toFixed(1)} ms, p90 ${percentile(times, 0.9).toFixed(1)} ms; ` +
          `orchestrator CPU ${(cpuMs / 50).toFixed(2)} ms per action (load average ${os.loadavg()[0]?.toFixed(1)})`,
      );
    }
    const [helper] = await helpersSettle(1);
    const { text } = await guestSh(guest, `grep -E '^(Rss|Pss):' /proc/${helper}/smaps_rollup`);
    const kib = (field: string) => Number(new RegExp(`^${field}:\\s+(\\d+) kB`, 'm').exec(text)?.[1]) / 1024;
    console.log(`desktop-helper: the helper's memory in the guest: RSS ${kib('Rss').toFixed(1)} MiB, PSS ${kib('Pss').toFixed(1)} MiB`);
  });

  it('a helper killed while idle (a pkill in the guest): the next action is answered by a new one, not failed', { timeout: 60_000 }, async () => {
    const id = ids[0] as string;
    assert.equal((await call('GET', id, 'screen')).status, 200);
    const [helper] = await helpersSettle(1);
    // The close must reach the host only after the next request left it, as when the helper
    // dies just before an action: the sshd process that carries the helper's channel is
    // stopped while the helper is killed, and let go once the request is on its way.
    const { text } = await guestSh(guest, `ps -o ppid= -p ${helper}`);
    const sshd = Number(text.trim());
    assert.ok(Number.isInteger(sshd) && sshd > 1, `the helper's parent: ${text}`);
    await guestSh(guest, `kill -STOP ${sshd} && kill -KILL ${helper}`);
    const next = call('GET', id, 'screen');
    await new Promise((resolve) => setTimeout(resolve, 300));
    await guestSh(guest, `kill -CONT ${sshd}`);
    const res = await next;
    assert.equal(res.status, 200, JSON.stringify(res.body));
    const [again] = await helpersSettle(1);
    assert.notEqual(again, helper);
  });

  it('an image without sbx-desktopd (built before it): the session runs its one-shot sbx-desktop per action instead', { timeout: 60_000 }, async () => {
    const id = ids[0] as string;
    const root = await guestRootPath(id, '/usr/local/bin');
    const saved = path.join(stateDir, 'sbx-desktopd.kept');
    await copyFile(`${root}/sbx-desktopd`, saved);
    // An old image, as far as the host can tell: no persistent helper, the one-shot one in its
    // place (a stand-in that answers one request read to the end of its stdin, as the old one did).
    await rm(`${root}/sbx-desktopd`);
    await writeFile(
      `${root}/sbx-desktop`,
      'import json, sys\nrequest = json.loads(sys.stdin.read())\nprint(json.dumps({"ok": True, "width": 7, "height": len(request["verb"])}))\n',
      { mode: 0o755 },
    );
    try {
      await guestSh(guest, `pkill -f '${HELPER_PATTERN}' || true`);
      await helpersSettle(0);
      for (let i = 0; i < 3; i++) {
        const res = await call('GET', id, 'screen');
        assert.equal(res.status, 200, JSON.stringify(res.body));
        assert.deepEqual(res.body, { width: 7, height: 'screen'.length }, 'answered by the one-shot helper');
      }
    } finally {
      await copyFile(saved, `${root}/sbx-desktopd`);
      await rm(`${root}/sbx-desktop`, { force: true });
    }
    // The session stays on the one-shot path (its image does not change under it).
    const res = await call('GET', id, 'windows');
    assert.equal(res.status, 502, JSON.stringify(res.body));
    assert.match(errorOf(res.body).message, /the desktop helper failed in the guest/);
  });
});
