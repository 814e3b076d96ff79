/**
 * What the guest answers when the host starts something in it: Chromium's launcher (its first
 * line is its pid) and a process's start (the guest says its pid). Whoever controls the guest
 * can replace the shell or the spawner that answers, so here hostile answers run for real in
 * a real sandbox, in place of ours, on the session's own SSH connection: the host must keep
 * nothing unbounded, end the channel it gave up, and keep its own table true.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { DEFAULT_PROCESS_LIMITS } from '../src/processes/limits.js';
import { ProcessTable } from '../src/processes/process-table.js';
import { BrowserStartError, DesktopBrowser } from '../src/ports/desktop-browser.js';
import type { GuestTransport } from '../src/transport/index.js';
import { commandLine } from '../src/transport/quote.js';
import { guestSh } from './helpers/guest.js';
import { sessionConnection } from './helpers/session-connection.js';

const MiB = 1024 * 1024;

/** The session's connection, but every command it spawns is `hostile` (and `command -v chromium` answers yes). */
function answering(connection: GuestTransport, hostile: string): GuestTransport {
  return new Proxy(connection, {
    get(target, name, receiver) {
      if (name === 'spawn') return (_command: string, timeoutMs?: number) => target.spawn(hostile, timeoutMs);
      if (name === 'exec')
        return (command: string, opts?: Parameters<GuestTransport['exec']>[1]) => target.exec(command === 'command -v chromium' ? 'true' : command, opts);
      const value = Reflect.get(target, name, receiver) as unknown;
      return typeof value === 'function' ? (value as (...args: unknown[]) => unknown).bind(target) : value;
    },
  });
}

/** A python3 in the guest named by `marker` (its argv), running `body`. */
function guestPython(marker: string, body: string): string {
  return `exec ${commandLine(['/usr/bin/python3', '-I', '-S', '-c', `import os, time\n${body}`, marker])}`;
}

async function running(connection: GuestTransport, marker: string): Promise<boolean> {
  return (await guestSh(connection, `pgrep -f -- '[${marker[0]}]${marker.slice(1)}' >/dev/null && echo yes || echo no`)).text.trim() === 'yes';
}

describe('red team: what the guest answers when the host starts something in it', () => {
  const session = sessionConnection();

  it("Chromium's launcher flooding instead of saying its pid: the start fails at once, nothing of it kept, its channel ended", async () => {
    const marker = 'sbx-redteam-launcher-flood';
    const browser = new DesktopBrowser(answering(session(), guestPython(marker, 'b = b"x" * 65536\nwhile True: os.write(1, b)')), 0);
    const heapBefore = process.memoryUsage().heapUsed;
    const began = performance.now();
    await assert.rejects(browser.start(), (err: Error) => err instanceof BrowserStartError && /something else than its pid/.test(err.message));
    const failedMs = performance.now() - began;
    // The flood's channel was closed with the failure: the guest's writer gets EPIPE and ends.
    let gone = false;
    for (const until = Date.now() + 10_000; !gone && Date.now() < until;) {
      gone = !(await running(session(), marker));
      if (!gone) await sleep(100);
    }
    const heapGrowth = process.memoryUsage().heapUsed - heapBefore;
    console.log(
      `a launcher flooding its stdout: the start failed after ${failedMs.toFixed(0)} ms, its writer gone: ${gone}, the host's heap +${(heapGrowth / MiB).toFixed(1)} MiB`,
    );
    assert.ok(gone, 'the flooding launcher still runs: the host kept its channel open (and read it)');
    assert.ok(heapGrowth < 32 * MiB, `the host's heap grew ${(heapGrowth / MiB).toFixed(1)} MiB`);
  });

  it("a guest giving a running process's pid to a second one: the second is refused, the first stays in the table and under the cap", async () => {
    const marker = 'sbx-redteam-same-pid';
    // Our wrapper shell says the pid first, on stderr; this one says 4242 every time and runs on.
    const liar = guestPython(marker, 'os.write(2, b"SBX-PID 4242\\n")\ntime.sleep(60)');
    const table = new ProcessTable(answering(session(), liar), 0, { ...DEFAULT_PROCESS_LIMITS, maxRunning: 2 });
    try {
      const spec = { argv: ['sleep', '60'], env: [], stdin: false };
      const first = await table.start(spec);
      assert.equal(first.pid, 4242);
      await assert.rejects(table.start(spec), (err: Error & { code?: string }) => err.code === 'guest_protocol_error' && /pid 4242/.test(err.message));
      assert.deepEqual(
        table.list(false).map((p) => p.pid),
        [4242],
      );
      assert.equal(table.get(4242), first, 'the first process is the one the table holds');
      assert.ok(first.running);
    } finally {
      await table.close();
    }
  });
});
