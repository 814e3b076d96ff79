import path from 'node:path';
import type { Logger } from 'pino';
import type { SettleOptions } from '../computer/computer-tool.js';
import type { AddressPool } from '../network/address-pool.js';
import type { ResourceNames } from '../network/names.js';
import { createSandboxNetwork, deleteLink, deleteNetns, netnsExists } from '../network/netns.js';
import type { PausedOnDisk, Runtime } from '../runtimes/runtime.js';
import { CleanupStack } from '../util/cleanup-stack.js';
import type { ConsoleLogLimits } from '../runtimes/console-log.js';
import { publicKeyBlob, readSessionKeys } from '../transport/ssh-keys.js';
import { GUEST_SSH_PORT } from '../guest/contract.js';
import { attachDesktop, sessionDirOf } from './boot.js';
import { Session } from './session.js';
import { removeSessionDir, type CountKeptDir } from './session-dir.js';
import type { SessionRecord } from './session-record.js';

export interface AdoptContext {
  stateDir: string;
  names: ResourceNames;
  runtime: Runtime;
  pool: AddressPool;
  display: number;
  displayServer?: 'init' | 'session';
  settle: SettleOptions;
  sshReconnectGiveUpMs?: number;
  log: Logger;
  consoleLog?: ConsoleLogLimits;
  /** Counts a session directory left on disk because something is still mounted in it. */
  countKeptDir?: CountKeptDir;
}

/** How long a live sandbox of an earlier run gets to let us in and show its display. */
const ADOPT_TIMEOUT_MS = 10_000;

/**
 * Takes back a session an earlier run of the orchestrator left ready: its sandbox must still
 * run (the runtime finds it), let us in with the session's own key while presenting the
 * pinned host key, and have a display that answers. Then it is a live session again, with a
 * cleanup stack that releases what it holds (the same releases start-up reconciliation
 * would run, in creation order). Returns undefined, having released nothing, if any of that
 * fails: the caller reclaims the sandbox like any other left behind.
 */
export async function adoptSession(record: SessionRecord, ctx: AdoptContext): Promise<Session | undefined> {
  const log = ctx.log.child({ sessionId: record.id, tenant: record.tenant });
  // A paused one too (memory: its sandbox frozen in place); see the pause's half-done cases below.
  if ((record.state !== 'ready' && record.state !== 'paused') || record.pooled) return undefined;
  // Only a sandbox reached without a network may have no address (it has no NIC).
  if (record.addressIndex === null && (record.transport ?? 'tcp') === 'tcp') return undefined;
  const sessionDir = sessionDirOf(ctx.stateDir, record.id);
  if (record.addressIndex !== null && record.addressIndex >= ctx.pool.size) {
    // SBX_SUBNET changed since: the stored lease is not an address of this run.
    log.warn('the address of a session left ready is outside the current subnet: reclaiming it');
    return undefined;
  }
  const lease = record.addressIndex === null ? undefined : ctx.pool.describe(record.addressIndex);
  const tcp = lease && { host: lease.guest, port: GUEST_SSH_PORT };
  // Paused to disk (or killed between the state written and the store told): a whole state
  // file is the truth (the runtime stops any process of it it finds). No sandbox until the resume.
  const onDisk = await ctx.runtime.adoptPaused?.(record.id, sessionDir).catch((err: unknown) => {
    log.warn({ err }, 'could not look for the saved state of a session left paused');
    return undefined;
  });
  if (onDisk) {
    const session = new Session(record);
    await holdResources(session, ctx, lease, sessionDir, () => onDisk.release());
    if (lease) await remakeNetwork(record.id, lease, onDisk, ctx, log);
    session.processAway = true;
    const since = record.paused?.mode === 'disk' ? record.paused.since : onDisk.since;
    record.paused = { mode: 'disk', since, bytes: onDisk.bytes };
    record.state = 'paused';
    log.info({ runtime: record.runtime, bytes: onDisk.bytes }, 'adopted a session paused to disk by an earlier run');
    return session;
  }
  const found = await ctx.runtime.adopt(record.id, sessionDir, tcp, ctx.consoleLog).catch((err: unknown) => {
    log.warn({ err }, 'could not look for the sandbox of a session left ready');
    return undefined;
  });
  if (!found) {
    log.info('the sandbox of a session left ready is gone: reclaiming what is left of it');
    return undefined;
  }

  // What it holds, oldest first, as a session booted in this run would have pushed it; the
  // SSH connection and the desktop go on top. A failed adoption runs all of it: the sandbox
  // is then reclaimed, as it would be by start-up reconciliation.
  const session = new Session(record);
  session.sandbox = found.sandbox;
  await holdResources(session, ctx, lease, sessionDir, () => found.release());
  // A kill -9 during a pause or resume leaves the old state or the new one: a paused session
  // found frozen is adopted paused (no connection until it resumes); a frozen sandbox of a
  // session stored ready (killed between the freeze and the store) is thawed and adopted
  // ready; a paused session found running (killed between the thaw and the store) is adopted
  // ready (manager.ts settles its record).
  const target = { sessionId: record.id, sessionDir, pid: found.sandbox.pid };
  const frozen = (await ctx.runtime.isPaused?.(target).catch(() => false)) ?? false;
  if (record.state === 'paused' && frozen) {
    // Stored paused to disk, found loaded by a resume that had removed the state file: in memory now.
    if (record.paused?.mode === 'disk') record.paused = { ...record.paused, mode: 'memory', bytes: 0 };
    log.info({ runtime: record.runtime, mode: record.paused?.mode }, 'adopted a paused session of an earlier run');
    return session;
  }
  try {
    if (frozen) await ctx.runtime.resume?.(target, 'memory');
    const keys = await readSessionKeys(sessionDir, path.join(sessionDir, 'config'));
    await attachDesktop(session, found.sandbox, keys.clientPrivateKey, publicKeyBlob(keys.hostPublicKey), Date.now() + ADOPT_TIMEOUT_MS, {
      display: ctx.display,
      displayServer: ctx.displayServer,
      settle: ctx.settle,
      sshReconnectGiveUpMs: ctx.sshReconnectGiveUpMs,
    });
  } catch (err) {
    log.warn({ err }, 'a sandbox left ready did not answer as it must: reclaiming it');
    await session.cleanup.run().catch((cleanupErr: unknown) => log.error({ err: cleanupErr }, 'could not reclaim all of it'));
    return undefined;
  }
  log.info({ runtime: record.runtime }, 'adopted a live session of an earlier run');
  return session;
}

/** What an adopted session holds, oldest first (as a session booted in this run pushed it): its release runs them all. */
async function holdResources(
  session: Session,
  ctx: AdoptContext,
  lease: ReturnType<AddressPool['describe']> | undefined,
  sessionDir: string,
  releaseSandbox: () => Promise<void>,
): Promise<void> {
  const { id } = session;
  const log = ctx.log.child({ sessionId: id, tenant: session.record.tenant });
  if (lease) ctx.pool.claim(lease.index);
  await session.cleanup.push('key dir', () => removeSessionDir(sessionDir, log, ctx.countKeptDir));
  if (lease) await session.cleanup.push('address lease', () => ctx.pool.release(lease.index));
  await session.cleanup.push(`netns ${ctx.names.netns(id)}`, () => deleteNetns(ctx.names.netns(id)));
  if (lease) await session.cleanup.push(`veth ${ctx.names.hostVeth(id)}`, () => deleteLink(ctx.names.hostVeth(id)));
  await session.cleanup.push(`sandbox ${id}`, releaseSandbox);
}

/**
 * A host reboot since the pause took the session's netns, veth and TAP with it (the state file
 * is on disk, they were in the kernel): they are made again as the boot made them, with the
 * same address and the TAP the VM's own, so that the resume has a network to start the VM in.
 * Their releases are already the session's (holdResources, the runtime's). One that cannot be
 * made is logged: the resume then fails saying why, and a delete still frees everything.
 */
async function remakeNetwork(
  sessionId: string,
  lease: ReturnType<AddressPool['describe']>,
  onDisk: PausedOnDisk,
  ctx: AdoptContext,
  log: Logger,
): Promise<void> {
  const netns = ctx.names.netns(sessionId);
  if (await netnsExists(netns)) return;
  const made = new CleanupStack();
  try {
    await createSandboxNetwork(ctx.names, sessionId, lease, made, ctx.runtime.capabilities.networkAttachment, onDisk.vmUser);
    log.info({ netns }, 'made the network of a session paused to disk again (the host rebooted since the pause)');
  } catch (err) {
    log.warn({ err, netns }, 'could not make the network of a session paused to disk again: its resume will fail');
    await made.run().catch(() => undefined);
  }
}
