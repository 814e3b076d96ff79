import { spawn } from 'node:child_process';
import { mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { Writable } from 'node:stream';
import type { SandboxClient } from '../client/index.js';
import { CONFIG_FILES, GUEST_USER } from '../guest/contract.js';
import type { SessionManager } from '../sessions/manager.js';
import { generateClientKey, publicKeyBlob, replaceClientKey } from '../transport/ssh-keys.js';
import { guestTransport, type GuestEndpoint } from '../transport/index.js';
import { run } from '../util/exec.js';
import { percentile } from './stats.js';

/**
 * Issue 27's create figures, each next to its floor measured in the same run:
 *  - a warm claim (create to ready from the pool) next to one bare SSH handshake with a fresh
 *    key to the same guest: the founding rule (a session's own key) costs that handshake, and
 *    the claim should cost little more (goal: ratio <= 1.5);
 *  - a cold create, step by step (the 'session ready' log line's steps), next to a bare
 *    `runc run` of the same rootfs to its first shell (goal: ratio <= 2).
 */

/** Collects the steps of every 'session ready' log line (the orchestrator logs at info to it). */
export class ReadyLog extends Writable {
  readonly ready: Array<{ source: string; ms: number; steps: Record<string, number> }> = [];
  override _write(chunk: Buffer, _encoding: string, done: () => void): void {
    for (const line of chunk.toString('utf8').split('\n')) {
      if (!line.includes('"session ready"')) continue;
      try {
        const entry = JSON.parse(line) as { source: string; ms: number; steps?: Record<string, number> };
        this.ready.push({ source: entry.source, ms: entry.ms, steps: entry.steps ?? {} });
      } catch {
        // not a JSON line: not ours
      }
    }
    done();
  }
}

export interface StepFigure {
  step: string;
  p50: number;
}

/** The p50 of each step over the ready lines of one source, in the order the steps ran. */
export function stepMedians(log: ReadyLog, source: 'warm' | 'cold', from = 0): StepFigure[] {
  const entries = log.ready.slice(from).filter((e) => e.source === source);
  const names = [...new Set(entries.flatMap((e) => Object.keys(e.steps)))];
  const steps = names.map((step) => ({
    step,
    p50: percentile(
      entries.map((e) => e.steps[step] ?? 0),
      50,
    ),
  }));
  return [
    ...steps,
    {
      step: 'total, server side',
      p50: percentile(
        entries.map((e) => e.ms),
        50,
      ),
    },
  ];
}

export interface WarmClaimFigures {
  claimMs: number[];
  handshakeMs: number[];
  steps: StepFigure[];
}

/**
 * `n` warm claims over the API (pool of one, each timed once the pool is full and idle), and
 * after each, on the claimed guest, a bare handshake with a fresh key: a new key pair made and
 * authorized (untimed: the swap), then the key made again and the connection opened, timed.
 */
export async function measureWarmClaims(manager: SessionManager, client: SandboxClient, log: ReadyLog, stateDir: string, n: number): Promise<WarmClaimFigures> {
  await manager.resizeWarmPool(1);
  const claimMs: number[] = [];
  const handshakeMs: number[] = [];
  const from = log.ready.length;
  try {
    for (let i = 0; i < n + 1; i++) {
      await waitForFullPool(manager);
      const started = performance.now();
      const sandbox = await client.create({ width: 1024, height: 768 });
      const ms = performance.now() - started;
      // The claimed session's background work (its helpers, the grabber's first frame) done first.
      await sandbox.screenshot();
      await sleep(300);
      const handshake = await bareHandshake(manager, stateDir, sandbox.id, authorizeInConfigDir);
      if (i > 0) {
        claimMs.push(ms);
        handshakeMs.push(handshake);
      }
      await sandbox.destroy();
    }
  } finally {
    await manager.resizeWarmPool(0);
  }
  // The first claim is a warm-up: its steps are left out too.
  const log1 = new ReadyLog();
  log1.ready.push(
    ...log.ready
      .slice(from)
      .filter((e) => e.source === 'warm')
      .slice(1),
  );
  return { claimMs, handshakeMs, steps: stepMedians(log1, 'warm') };
}

/** How a fresh key is let into a session's guest before the bare handshake (untimed: the swap). */
export type AuthorizeKey = (
  guest: { sessionDir: string; endpoint: GuestEndpoint; hostPublicKey: string },
  key: { private: string; public: string },
) => Promise<void>;

/** A container's config dir is the guest's (a live bind mount): the key is written there, as a claim does. */
const authorizeInConfigDir: AuthorizeKey = ({ sessionDir }, key) => replaceClientKey(sessionDir, path.join(sessionDir, 'config'), key);

/**
 * One bare handshake with a fresh key to a session's guest: a key pair made and authorized
 * (untimed), then the key made again and a connection opened with it, timed.
 */
export async function bareHandshake(manager: SessionManager, stateDir: string, id: string, authorize: AuthorizeKey): Promise<number> {
  const endpoint = manager.registry.find(id)?.sandbox?.endpoint;
  if (!endpoint) throw new Error(`session ${id} has no endpoint`);
  const sessionDir = path.join(stateDir, id);
  const hostPublicKey = (await readFile(path.join(sessionDir, 'config', CONFIG_FILES.hostKeyPub), 'utf8')).trim();
  const key = generateClientKey(id);
  await authorize({ sessionDir, endpoint, hostPublicKey }, key);
  const started = performance.now();
  generateClientKey(id); // what a claim pays for its key, in the same figure
  const connection = guestTransport({ endpoint, username: GUEST_USER, privateKey: key.private, pinnedHostKey: publicKeyBlob(hostPublicKey) });
  await connection.open(10_000);
  const ms = performance.now() - started;
  connection.close();
  return ms;
}

async function waitForFullPool(manager: SessionManager, timeoutMs = 60_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    const status = manager.warmPoolStatus();
    if (status.ready.length >= status.target && status.booting === 0) {
      // Let the guest's own start-up work (the desktop settling) finish too.
      await sleep(300);
      return;
    }
    await sleep(25);
  }
  throw new Error('the warm pool did not fill within a minute');
}

/**
 * The floor of a cold create: `runc run` of the image's rootfs (read-only, no user namespace,
 * no network, no mounts of ours) to the first line its shell prints, `n` times.
 */
export async function bareRuncRun(runcBin: string, rootfs: string, n: number): Promise<number[]> {
  const dir = await mkdtemp(path.join(os.tmpdir(), 'sbx-bench-runc-'));
  const bundle = path.join(dir, 'bundle');
  const root = path.join(dir, 'runc');
  try {
    await mkdir(bundle, { recursive: true });
    await run([runcBin, 'spec', '--bundle', bundle]);
    const spec = JSON.parse(await readFile(path.join(bundle, 'config.json'), 'utf8')) as {
      root: { path: string; readonly: boolean };
      process: { terminal: boolean; args: string[] };
    };
    spec.root = { path: rootfs, readonly: true };
    spec.process.terminal = false;
    spec.process.args = ['/bin/sh', '-c', 'echo up'];
    await writeFile(path.join(bundle, 'config.json'), JSON.stringify(spec));
    const samples: number[] = [];
    for (let i = 0; i < n + 1; i++) {
      const ms = await runToFirstLine(runcBin, root, bundle, `sbx-bench-floor-${process.pid}-${i}`);
      if (i > 0) samples.push(ms);
    }
    return samples;
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

function runToFirstLine(runcBin: string, root: string, bundle: string, id: string): Promise<number> {
  return new Promise((resolve, reject) => {
    const started = performance.now();
    let firstLineMs: number | undefined;
    const child = spawn(runcBin, ['--root', root, 'run', '--bundle', bundle, id], { stdio: ['ignore', 'pipe', 'pipe'] });
    child.stdout.on('data', (chunk: Buffer) => {
      if (firstLineMs === undefined && chunk.includes('\n')) firstLineMs = performance.now() - started;
    });
    let stderr = '';
    child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString('utf8')));
    child.on('error', reject);
    child.on('exit', (code) => {
      if (firstLineMs !== undefined) resolve(firstLineMs);
      else reject(new Error(`runc run exited ${code} before its shell printed: ${stderr.slice(0, 300)}`));
    });
  });
}
