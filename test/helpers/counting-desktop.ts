import assert from 'node:assert/strict';
import type { ChildProcess } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { openKeyStore } from '../../src/api/auth/key-store-file.js';
import type { ResourceNames } from '../../src/network/names.js';
import { removeEmptyPrefixCgroups } from './orchestrator.js';
import { freePort, startServeOn } from './serve.js';

/**
 * What the pause tests of container desktops share: a real `sbx serve` that can be killed and
 * started again on the same port and state, and an xterm that counts on the screen and into a
 * file the host reads through the container's root (which stays mounted while paused).
 */

/** The counter's xterm sits here (top left): outside it, the screen must come back pixel for pixel. */
export const COUNTER_BOX = { width: 360, height: 120 };

export interface ServeRig {
  readonly stateDir: string;
  readonly port: number;
  /** API keys of tenants `alpha` and `beta`. */
  readonly keys: { alpha: string; beta: string };
  /** SIGKILL, then a start on the same port and state (an orchestrator crash and restart); `whileDown` runs between. */
  crashAndRestart(whileDown?: () => Promise<void>): Promise<void>;
  stop(): Promise<void>;
}

export async function startServeRig(names: ResourceNames, dirPrefix: string): Promise<ServeRig> {
  const stateDir = await mkdtemp(path.join(os.tmpdir(), dirPrefix));
  const store = openKeyStore(stateDir);
  const keys = { alpha: store.keys.create('alpha').key, beta: store.keys.create('beta').key };
  store.close();
  const port = await freePort();
  let child: ChildProcess = await startServeOn(stateDir, port);
  const ended = (c: ChildProcess) => new Promise((resolve) => c.once('exit', resolve));
  return {
    stateDir,
    port,
    keys,
    async crashAndRestart(whileDown) {
      const gone = ended(child);
      child.kill('SIGKILL');
      await gone;
      await whileDown?.();
      child = await startServeOn(stateDir, port);
    },
    async stop() {
      if (child.exitCode === null) {
        const gone = ended(child);
        child.kill('SIGTERM');
        await gone;
      }
      await rm(stateDir, { recursive: true, force: true });
      await rm(names.runcRoot, { recursive: false, force: true }).catch(() => undefined);
      await rm(names.rootfsRoot, { recursive: false, force: true }).catch(() => undefined);
      await removeEmptyPrefixCgroups();
    },
  };
}

/** "<pid> <count>" as the guest's counter last wrote it, read from the host through the container's root. */
export async function counterOf(names: ResourceNames, id: string): Promise<{ pid: number; count: number }> {
  const text = await readFile(path.join(names.containerRootfs(id), 'var/tmp/counter'), 'utf8');
  const [pid, count] = text.trim().split(' ').map(Number);
  return { pid: pid ?? 0, count: count ?? 0 };
}

/** An xterm in the top left counting 20 times a second, on the screen and into /var/tmp/counter; resolves once it counts and is drawn. */
export async function startCounter(bash: (id: string, command: string) => Promise<string>, names: ResourceNames, id: string): Promise<void> {
  const loop =
    'i=0; while :; do i=$((i+1)); echo "$$ $i" > /var/tmp/counter.new && mv /var/tmp/counter.new /var/tmp/counter; printf "\\rcount %s " $i; sleep 0.05; done';
  await bash(id, `setsid nohup xterm -geometry 30x3+0+0 -e sh -c '${loop}' >/dev/null 2>&1 < /dev/null &`);
  const deadline = Date.now() + 20_000;
  while (Date.now() < deadline && !existsSync(path.join(names.containerRootfs(id), 'var/tmp/counter'))) await sleep(100);
  await sleep(1_500); // its window mapped and drawn
  assert.ok((await counterOf(names, id)).count > 0, 'the counter counts');
}
