import { readFile } from 'node:fs/promises';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import type { Sandbox, SandboxClient } from '../client/index.js';
import { CONFIG_FILES } from '../guest/contract.js';
import { GUEST_KEY_PATHS } from '../runtimes/firecracker/ssh-keys/key-rotation.js';
import { SshRotationTransport } from '../runtimes/firecracker/ssh-keys/ssh-rotation-transport.js';
import { REKEY_KEY_FILE } from '../runtimes/qemu/snapshot.js';
import type { SessionManager } from '../sessions/manager.js';
import { bareHandshake, stepMedians, type AuthorizeKey, type ReadyLog, type StepFigure } from './create-ready.js';

/**
 * The warm path of a VM runtime without a warm pool (issue 27): a fork from a snapshot
 * (docs/snapshots.md). A running session is snapshotted once, then `n` forks are created from
 * it in turn, each timed to ready over the API, and after each, on the fork's guest, one bare
 * SSH handshake with a fresh key: the floor a fork's own key sets, as for a warm claim.
 */
export interface ForkFigures {
  snapshotMs: number;
  snapshotBytes: number;
  forkMs: number[];
  handshakeMs: number[];
  /** The forks' steps (their 'session ready' lines), p50 each. */
  steps: StepFigure[];
}

/**
 * `source` is paused in memory once snapshotted (an idle TCG guest beside the forks would take
 * CPU from them), and destroyed at the end.
 */
export async function measureForks(
  manager: SessionManager,
  client: SandboxClient,
  log: ReadyLog,
  stateDir: string,
  source: Sandbox,
  n: number,
): Promise<ForkFigures> {
  let started = performance.now();
  const from = log.ready.length;
  const forkMs: number[] = [];
  const handshakeMs: number[] = [];
  let snapshot: Awaited<ReturnType<SandboxClient['snapshots']['create']>> | undefined;
  try {
    snapshot = await client.snapshots.create(source.id, {});
  } finally {
    if (!snapshot) await source.destroy();
  }
  const snapshotMs = performance.now() - started;
  try {
    await source.pause('memory');
    for (let i = 0; i < n; i++) {
      started = performance.now();
      const fork = await client.create({ snapshot: snapshot.id });
      forkMs.push(performance.now() - started);
      try {
        // The fork's own start-up work (its helpers, the grabber's first frame) done first.
        await fork.screenshot();
        await sleep(300);
        handshakeMs.push(await bareHandshake(manager, stateDir, fork.id, authorizeWithRekeyKey));
      } finally {
        await fork.destroy();
      }
    }
  } finally {
    await client.snapshots.delete(snapshot.id);
    await source.destroy();
  }
  return { snapshotMs, snapshotBytes: snapshot.bytes, forkMs, handshakeMs, steps: stepMedians(log, 'cold', from) };
}

/**
 * A VM's config is its own copy (a tmpfs from the config drive): the fresh key is written there
 * as a fork's rotation writes the session's, by the session's rekey key through sbx-rekey
 * (root's forced command), beside the session's own key.
 */
const authorizeWithRekeyKey: AuthorizeKey = async ({ sessionDir, endpoint, hostPublicKey }, key) => {
  const rekeyKey = await readFile(path.join(sessionDir, REKEY_KEY_FILE), 'utf8');
  const own = (await readFile(path.join(sessionDir, 'config', CONFIG_FILES.authorizedKeys), 'utf8')).trim();
  const transport = new SshRotationTransport({
    baseEndpoint: endpoint,
    sessionEndpoint: endpoint,
    baseClientPrivateKey: rekeyKey,
    baseHostPublicKey: hostPublicKey,
  });
  const connection = await transport.connect(rekeyKey, hostPublicKey);
  try {
    await connection.writeFile(GUEST_KEY_PATHS.authorizedKeys, `${own}\n${key.public.trim()}\n`, 0o600);
  } finally {
    await connection.close();
  }
};
