import { writeFile } from 'node:fs/promises';
import type { Logger } from 'pino';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { ComputerTool, type SettleOptions } from '../computer/computer-tool.js';
import { Desktop } from '../computer/desktop.js';
import { startWarmHelpers, type WarmHelpers } from '../computer/warm-helpers.js';
import { modelSize, Scaler } from '../computer/scaling.js';
import { CONFIG_FILES, DESKTOP_STARTING_MARK, GUEST_USER, renderSettings, sandboxSettings } from '../guest/contract.js';
import type { GuestImage } from '../guest/image/builder.js';
import type { AddressLease } from '../network/address-pool.js';
import type { ResourceNames } from '../network/names.js';
import { createSandboxNetwork, type SandboxNetwork } from '../network/netns.js';
import type { NetworkPolicy } from '../network/policy/network-policy.js';
import { consoleLogTail, DEFAULT_CONSOLE_LOG_LIMITS, keepConsoleLog, logsDirOf, type ConsoleLogLimits } from '../runtimes/console-log.js';
import type { RunningSandbox, Runtime } from '../runtimes/runtime.js';
import { generateSessionKeys, keyFingerprint, publicKeyBlob, writeSessionKeys, type SessionKeys } from '../transport/ssh-keys.js';
import { guestTransport, SshTimeoutError, type GuestTransport } from '../transport/index.js';
import { OrchestratorError } from '../errors.js';
import { CleanupStack } from '../util/cleanup-stack.js';
import type { StepTimes } from '../util/step-times.js';
import type { Session } from './session.js';
import type { ResourceKind } from './resource-ledger.js';
import { removeSessionDir, type CountKeptDir } from './session-dir.js';

export interface BootContext {
  settle: SettleOptions;
  stateDir: string;
  names: ResourceNames;
  display: number;
  /**
   * Who starts the X server: our init (default: the session is ready once the display
   * answers), or the session's own programs (the `xfce` template: ready once SSH is up; the
   * desktop attaches when the display answers, and answers 409 display_not_ready until then).
   */
  displayServer?: 'init' | 'session';
  runtime: Runtime;
  image: GuestImage;
  memoryMiB: number;
  pidsLimit: number;
  policy: NetworkPolicy;
  /** The store's ledger: each host resource is recorded here before it is taken. */
  ledger?: (sessionId: string, kind: ResourceKind, name: string) => void;
  /** The store's lease of host id ranges (containers' user namespaces). */
  leaseIdRange?: (sessionId: string, base: number, size: number, count: number, takeHostWide: (first: number) => boolean) => number;
  /** How long a dropped SSH connection is retried before the session fails (default 30 s). */
  sshReconnectGiveUpMs?: number;
  /** Absolute time (ms) by which the guest must be ready. */
  deadline: number;
  log: Logger;
  /** Console log caps (config: SBX_CONSOLE_LOG_MAX_BYTES, SBX_KEPT_LOGS, SBX_KEPT_LOGS_MAX_BYTES). */
  consoleLog?: ConsoleLogLimits;
  /** Counts a session directory left on disk because something is still mounted in it. */
  countKeptDir?: CountKeptDir;
  /** Where the boot's steps record their times (logged with 'session ready', read by the bench). */
  steps?: StepTimes;
}

export function sessionDirOf(stateDir: string, sessionId: string): string {
  return path.join(stateDir, sessionId);
}

/** The directory the guest sees as its config (bind-mounted, or made into a config drive). */
export function configDirOf(stateDir: string, sessionId: string): string {
  return path.join(sessionDirOf(stateDir, sessionId), 'config');
}

/** A sandbox that runs, with the keys it was booted with (its sshd is not yet known to answer). */
export interface StartedSandbox {
  sandbox: RunningSandbox;
  keys: SessionKeys;
  /** The boot deadline, stretched for runtimes that need longer (see RuntimeCapabilities.bootTimeoutMs). */
  deadline: number;
  logsDir: string;
}

/**
 * The steps from nothing to a ready sandbox: keys, config, network, runtime, SSH with the
 * pinned host key, display answering. Each resource's release goes onto the session's
 * cleanup stack the moment it is taken; the caller runs the stack if any step throws.
 */
export async function bootSandbox(session: Session, lease: AddressLease | undefined, ctx: BootContext): Promise<void> {
  const started = await startSandbox(session, lease, ctx);
  const { sandbox, keys, deadline, logsDir } = started;
  try {
    await attachDesktop(session, sandbox, keys.clientPrivateKey, publicKeyBlob(keys.hostPublicKey), deadline, ctx);
  } catch (err) {
    throw await withConsoleLog(err, sandbox, logsDir, session.id, ctx.consoleLog);
  }
}

/**
 * A sandbox for the warm pool: booted like any other, and known ready (SSH logs in with the
 * pool's key, the helpers' launcher listens, the display answers through a helper forked from
 * it), but with no connection kept open and no desktop attached: the session that claims it
 * brings its own key and its own connection (see pool/claim.ts).
 */
export async function bootPooledSandbox(session: Session, lease: AddressLease | undefined, ctx: BootContext): Promise<PooledBoot> {
  const { sandbox, keys, deadline, logsDir } = await startSandbox(session, lease, ctx);
  const probe = new CleanupStack();
  let warm: WarmHelpers | undefined;
  try {
    const connection = guestTransport({
      endpoint: sandbox.endpoint,
      username: GUEST_USER,
      privateKey: keys.clientPrivateKey,
      pinnedHostKey: publicKeyBlob(keys.hostPublicKey),
    });
    await probe.push('probe connection', () => connection.close());
    await connection.open(remaining(deadline), () => sandbox.isAlive());
    // The helpers' launcher, so that a claim forks them instead of starting an interpreter
    // (warm-helpers.ts). Without it a claim starts them as a cold boot does: slower, not wrong.
    warm = await startWarmHelpers(connection, ctx.display).catch((err: unknown) => {
      ctx.log.warn({ err }, 'warm pool: the desktop helpers could not be made ready in advance');
      return undefined;
    });
    const desktop = new Desktop(connection, ctx.display, { width: session.record.width, height: session.record.height }, ctx.displayServer, warm);
    await probe.push('probe desktop', () => desktop.close());
    if (ctx.displayServer !== 'session') await waitForDesktop(connection, desktop, deadline, () => sandbox.isAlive());
  } catch (err) {
    throw await withConsoleLog(err, sandbox, logsDir, session.id, ctx.consoleLog);
  } finally {
    // The pool keeps no connection: its access is its key alone, which a claim replaces.
    await probe.run();
  }
  return { keys, warm };
}

/** What a pooled boot leaves for the claim: the keys it was booted with, and its warm helpers if they started. */
export interface PooledBoot {
  keys: SessionKeys;
  warm: WarmHelpers | undefined;
}

/** Keys, config dir, network and the runtime: everything up to a running sandbox. */
async function startSandbox(session: Session, lease: AddressLease | undefined, ctx: BootContext): Promise<StartedSandbox> {
  const { id, width, height } = session.record;
  const sessionDir = sessionDirOf(ctx.stateDir, id);
  const configDir = configDirOf(ctx.stateDir, id);
  const step = (name: string) => ctx.steps?.mark(name);
  const record = (kind: ResourceKind, name: string): void => ctx.ledger?.(id, kind, name);

  // Pushed before the directory exists, so it goes last and even a half-written key is removed.
  record('key-dir', sessionDir);
  await session.cleanup.push('key dir', () => removeSessionDir(sessionDir, ctx.log, ctx.countKeptDir));
  const keys = generateSessionKeys(id);
  await writeSessionKeys(sessionDir, configDir, keys);
  // Shown in its view, so anyone can check the key its guest presents.
  session.record.hostKeyFingerprint = keyFingerprint(keys.hostPublicKey);
  await writeFile(
    path.join(configDir, CONFIG_FILES.settings),
    renderSettings(
      sandboxSettings({
        id,
        hostname: `sbx-${id}`,
        display: ctx.display,
        screen: { width, height },
        guestConfiguresNetwork: ctx.runtime.capabilities.guestConfiguresNetwork,
        lease,
        // Over vsock the guest listens for the host there (sandbox-init); a container's socket needs nothing of it.
        transport: session.record.transport === 'vsock' ? 'vsock' : 'tcp',
      }),
    ),
    { mode: 0o644 },
  );

  step('keys and config');
  // A VM's own uid/gid first: its TAP is made owned by it.
  const vmUser = await ctx.runtime.leaseVmUser?.(session.cleanup, record);
  let network: SandboxNetwork;
  if (lease) {
    // The policy first: the sandbox's veth is fenced from the moment it exists.
    await ctx.policy.admit(id, lease, { egress: session.record.egress }, session.cleanup, ctx.log);
    step('network policy');
    record('netns', ctx.names.netns(id));
    record('veth', ctx.names.hostVeth(id));
    network = await createSandboxNetwork(ctx.names, id, lease, session.cleanup, ctx.runtime.capabilities.networkAttachment, vmUser);
  } else {
    // No address: nothing to fence, no netns of ours (the runtime makes the sandbox one with
    // only lo, which goes with it); the control channel is a socket.
    network = { attachment: 'none' };
  }
  step('network');
  // A VM under TCG needs longer than the orchestrator-wide boot timeout: the longer applies.
  const deadline = Math.max(ctx.deadline, Date.now() + ctx.runtime.capabilities.bootTimeoutMs);
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
      consoleLog: ctx.consoleLog,
      record,
      leaseIdRange: ctx.leaseIdRange && ((base, size, count, takeHostWide) => ctx.leaseIdRange!(id, base, size, count, takeHostWide)),
      vmUser,
      volumes: session.volumes?.attachments,
      snapshot: session.fromSnapshot,
      step,
    },
    session.cleanup,
  );
  session.sandbox = sandbox;
  step('runtime: the rest');
  return { sandbox, keys, deadline, logsDir };
}

/**
 * A sandbox that did not come up: say how it ended if it did, and keep its console log (the
 * session dir is removed with the session) and say where.
 */
async function withConsoleLog(
  err: unknown,
  sandbox: RunningSandbox,
  logsDir: string,
  sessionId: string,
  limits: ConsoleLogLimits = DEFAULT_CONSOLE_LOG_LIMITS,
): Promise<unknown> {
  if (!(err instanceof Error) || err instanceof OrchestratorError) return err;
  const exit = sandbox.isAlive() ? undefined : await sandbox.exited;
  const kept = exit?.consoleLogKeptAt ?? (await keepConsoleLog(sandbox.consoleLogPath, logsDir, sessionId, limits));
  const parts = [err.message, exit && `(${exit.reason})`, kept && !exit?.consoleLogKeptAt && `(console log kept at ${kept})`];
  return new Error(parts.filter(Boolean).join(' '), { cause: err });
}

/**
 * The session's own SSH connection (its client key, the pinned host key, checked again by
 * the handshake's host verifier) and its desktop, answered once: what makes a session ready.
 * Both go onto the session's cleanup stack.
 */
export async function attachDesktop(
  session: Session,
  sandbox: RunningSandbox,
  clientPrivateKey: string,
  pinnedHostKey: Buffer,
  deadline: number,
  ctx: Pick<BootContext, 'display' | 'displayServer' | 'settle' | 'sshReconnectGiveUpMs' | 'steps'>,
  /**
   * 'await' (a boot, an adoption): ready once the display answers. 'background' (a resume, or
   * a warm claim: the display answered before the pause, or in the pool): ready once SSH is up,
   * the desktop helpers starting meanwhile, so that the first action finds them running.
   */
  display: 'await' | 'background' = 'await',
  /** A warm launcher in the guest (a claimed pooled sandbox's): its helpers are forked, not started. */
  warm?: WarmHelpers,
): Promise<void> {
  const { width, height } = session.record;
  const connection = guestTransport({
    endpoint: sandbox.endpoint,
    username: GUEST_USER,
    privateKey: clientPrivateKey,
    pinnedHostKey,
    reconnectGiveUpMs: ctx.sshReconnectGiveUpMs,
  });
  await session.cleanup.replace('ssh connection', () => connection.close());
  session.connection = connection;
  let desktopOf: Desktop | undefined;
  session.detach = () => {
    desktopOf?.close();
    connection.close();
  };
  await connection.open(remaining(deadline), () => sandbox.isAlive());
  ctx.steps?.mark('ssh handshake');

  const screen = { width, height };
  const desktop = new Desktop(connection, ctx.display, screen, ctx.displayServer, warm);
  await session.cleanup.replace('desktop input', () => desktop.close());
  desktopOf = desktop;
  // A display the session starts itself is not waited for: each action says whether it answers.
  if (ctx.displayServer !== 'session') {
    if (display === 'await') {
      await waitForDesktop(connection, desktop, deadline, () => sandbox.isAlive());
      ctx.steps?.mark('helpers and display');
    }
    // A display that does not answer is reported by the first action, as on any session. Once
    // it answers, the grabber takes its first (whole) frame, so the first screenshot needs none.
    else
      void waitForDisplay(desktop, deadline, () => sandbox.isAlive())
        .then(() => desktop.capture())
        .catch(() => undefined);
  }
  const model = { width: session.record.modelWidth, height: session.record.modelHeight };
  const computer = new ComputerTool(desktop, new Scaler(screen, model), ctx.settle);
  session.computer = computer;
  desktop.onScreenResize = (size) => followScreen(session, computer, size);
}

/** The session's screen is the size its own programs gave their display (Desktop.followDisplaySize); the model's follows. */
function followScreen(session: Session, computer: ComputerTool, size: { width: number; height: number }): void {
  const { record } = session;
  const unscaled = record.modelWidth === record.width && record.modelHeight === record.height;
  const model = unscaled ? size : modelSize(size, 'auto');
  Object.assign(record, { width: size.width, height: size.height, modelWidth: model.width, modelHeight: model.height });
  computer.scaler = new Scaler(size, model);
}

/**
 * sshd starts beside the desktop: the display answering (the input helper started, asked
 * where the pointer is) and the desktop's start done (the session's first window up,
 * DESKTOP_STARTING_MARK gone) are waited for side by side.
 */
async function waitForDesktop(connection: GuestTransport, desktop: Desktop, deadline: number, isAlive: () => boolean): Promise<void> {
  await Promise.all([waitForDisplay(desktop, deadline, isAlive), waitForDesktopStart(connection, deadline)]);
}

/** What a boot that waited in vain for the first window says (never the wait's own script). */
const NO_WINDOW_IN_TIME = 'the desktop did not finish starting in time (the session showed no window)';

/**
 * One channel whose shell waits in the guest until the mark is gone: inotifywait (in every
 * image) sleeps until it is deleted, a second at most, so the wait costs one process, not a
 * `sleep` every few ms taking the guest's CPU from the desktop it waits for (its one CPU: a
 * container's quota). Without inotifywait, or once the mark went before its watch was set, a
 * look every 50 ms. Bounded in the guest too.
 */
async function waitForDesktopStart(connection: GuestTransport, deadline: number): Promise<void> {
  const looks = Math.ceil(remaining(deadline) / 50);
  const mark = DESKTOP_STARTING_MARK;
  const result = await connection
    .exec(
      `i=0; while [ -e ${mark} ]; do [ "$i" -lt ${looks} ] || exit 1; inotifywait -qq -t 1 -e delete_self ${mark} 2>/dev/null || sleep 0.05; i=$((i + 1)); done`,
      { timeoutMs: remaining(deadline), maxOutputBytes: 1024 },
    )
    .catch((err: unknown) => {
      // The wait's own script is no part of what a user reads: its timeout says what it waited for.
      throw err instanceof SshTimeoutError ? new Error(NO_WINDOW_IN_TIME, { cause: err }) : err;
    });
  if (result.exitCode !== 0) throw new Error(NO_WINDOW_IN_TIME);
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

/** The last lines the guest printed (read from the log's end), for an error message a user can act on. */
export async function consoleTail(session: Session, lines = 15): Promise<string> {
  if (!session.sandbox) return '';
  return consoleLogTail(session.sandbox.consoleLogPath, lines);
}
