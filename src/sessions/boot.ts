import { readFile, writeFile } from 'node:fs/promises';
import type { Logger } from 'pino';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { ComputerTool, type SettleOptions } from '../computer/computer-tool.js';
import { Desktop } from '../computer/desktop.js';
import { Scaler } from '../computer/scaling.js';
import { CONFIG_FILES, GUEST_USER, renderSettings } from '../guest/contract.js';
import type { GuestImage } from '../guest/image/builder.js';
import type { AddressLease } from '../network/address-pool.js';
import type { ResourceNames } from '../network/names.js';
import { createSandboxNetwork } from '../network/netns.js';
import type { NetworkPolicy } from '../network/policy/network-policy.js';
import { keepConsoleLog, logsDirOf } from '../runtimes/console-log.js';
import type { RunningSandbox, Runtime } from '../runtimes/runtime.js';
import { generateSessionKeys, publicKeyBlob, removeSessionDir, writeSessionKeys } from '../transport/keys.js';
import { GuestConnection } from '../transport/ssh-connection.js';
import { OrchestratorError } from '../errors.js';
import type { Session } from './session.js';

export interface BootContext {
  settle: SettleOptions;
  stateDir: string;
  names: ResourceNames;
  display: number;
  runtime: Runtime;
  image: GuestImage;
  memoryMiB: number;
  pidsLimit: number;
  policy: NetworkPolicy;
  /** Absolute time (ms) by which the guest must be ready. */
  deadline: number;
  log: Logger;
}

export function sessionDirOf(stateDir: string, sessionId: string): string {
  return path.join(stateDir, sessionId);
}

/**
 * The steps from nothing to a ready sandbox: keys, config, network, runtime, SSH with the
 * pinned host key, display answering. Each resource's release goes onto the session's
 * cleanup stack the moment it is taken; the caller runs the stack if any step throws.
 */
export async function bootSandbox(session: Session, lease: AddressLease, ctx: BootContext): Promise<void> {
  const { id, width, height } = session.record;
  const sessionDir = sessionDirOf(ctx.stateDir, id);
  const configDir = path.join(sessionDir, 'config');
  const started = performance.now();
  const step = (name: string) => ctx.log.debug({ step: name, ms: Math.round(performance.now() - started) }, 'boot step done');

  // Pushed before the directory exists, so it goes last and even a half-written key is removed.
  await session.cleanup.push('key dir', () => removeSessionDir(sessionDir));
  const keys = generateSessionKeys(id);
  await writeSessionKeys(sessionDir, configDir, keys);
  await writeFile(
    path.join(configDir, CONFIG_FILES.settings),
    renderSettings({
      SANDBOX_ID: id,
      SANDBOX_HOSTNAME: `sbx-${id}`,
      SANDBOX_DISPLAY: ctx.display,
      SANDBOX_WIDTH: width,
      SANDBOX_HEIGHT: height,
      SANDBOX_DEPTH: 24,
      SANDBOX_NET_CONFIGURE: ctx.runtime.name === 'container' ? 0 : 1,
      SANDBOX_ADDRESS: `${lease.guest}/${lease.prefixLength}`,
      SANDBOX_GATEWAY: lease.gateway,
    }),
    { mode: 0o644 },
  );

  step('keys and config');
  // The policy first: the sandbox's veth is fenced from the moment it exists.
  await ctx.policy.admit(id, lease, { egress: session.record.egress }, session.cleanup, ctx.log);
  step('network policy');
  const network = await createSandboxNetwork(ctx.names, id, lease, session.cleanup, ctx.runtime.networkAttachment, ctx.runtime.tapOwner);
  step('network');
  // A VM under TCG needs longer than the orchestrator-wide boot timeout: the longer applies.
  const deadline = Math.max(ctx.deadline, Date.now() + (ctx.runtime.bootTimeoutMs ?? 0));
  const logsDir = logsDirOf(ctx.stateDir);
  const sandbox = await ctx.runtime.start(
    {
      sessionId: id,
      image: ctx.image,
      sessionDir,
      configDir,
      screen: { width, height },
      hostname: `sbx-${id}`,
      network,
      memoryMiB: ctx.memoryMiB,
      pidsLimit: ctx.pidsLimit,
      logsDir,
    },
    session.cleanup,
  );
  session.sandbox = sandbox;
  step('runtime started');
  try {
    await connectAndWaitForDisplay(session, sandbox, keys, deadline, ctx, step);
  } catch (err) {
    throw await withConsoleLog(err, sandbox, logsDir, id);
  }
  step('display answering');
}

/**
 * A sandbox that did not come up: say how it ended if it did, and keep its console log (the
 * session dir is removed with the session) and say where.
 */
async function withConsoleLog(err: unknown, sandbox: RunningSandbox, logsDir: string, sessionId: string): Promise<unknown> {
  if (!(err instanceof Error) || err instanceof OrchestratorError) return err;
  const exit = sandbox.isAlive() ? undefined : await sandbox.exited;
  const kept = exit?.consoleLogKeptAt ?? (await keepConsoleLog(sandbox.consoleLogPath, logsDir, sessionId));
  const parts = [err.message, exit && `(${exit.reason})`, kept && !exit?.consoleLogKeptAt && `(console log kept at ${kept})`];
  return new Error(parts.filter(Boolean).join(' '), { cause: err });
}

async function connectAndWaitForDisplay(
  session: Session,
  sandbox: RunningSandbox,
  keys: ReturnType<typeof generateSessionKeys>,
  deadline: number,
  ctx: BootContext,
  step: (name: string) => void,
): Promise<void> {
  const { width, height } = session.record;

  const connection = new GuestConnection({
    endpoint: sandbox.endpoint,
    username: GUEST_USER,
    privateKey: keys.clientPrivateKey,
    pinnedHostKey: publicKeyBlob(keys.hostPublicKey),
  });
  await session.cleanup.push('ssh connection', () => connection.close());
  session.connection = connection;
  await connection.open(remaining(deadline), sandbox.isAlive);
  step('ssh connected');

  const desktop = new Desktop(connection, ctx.display);
  await session.cleanup.push('desktop input', () => desktop.close());
  await waitForDisplay(desktop, deadline, sandbox.isAlive);
  const screen = { width, height };
  const model = { width: session.record.modelWidth, height: session.record.modelHeight };
  session.computer = new ComputerTool(desktop, new Scaler(screen, model), ctx.settle);
}

/** Xvfb may still be starting when sshd already answers: wait until the display replies. */
async function waitForDisplay(desktop: Desktop, deadline: number, isAlive: () => boolean): Promise<void> {
  let lastError: unknown;
  while (Date.now() < deadline) {
    if (!isAlive()) throw new Error('the sandbox exited while waiting for its display');
    try {
      await desktop.cursorPosition();
      return;
    } catch (err) {
      lastError = err;
      await sleep(50);
    }
  }
  throw new Error(`the display did not answer in time (last error: ${(lastError as Error | undefined)?.message ?? 'none'})`);
}

function remaining(deadline: number): number {
  return Math.max(1, deadline - Date.now());
}

/** The last lines the guest printed, for an error message a user can act on. */
export async function consoleTail(session: Session, lines = 15): Promise<string> {
  if (!session.sandbox) return '';
  try {
    const text = await readFile(session.sandbox.consoleLogPath, 'utf8');
    return text.trimEnd().split('\n').slice(-lines).join('\n');
  } catch {
    return '';
  }
}
