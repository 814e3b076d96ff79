import { randomBytes } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import type { SessionKeys } from '../../../transport/ssh-keys.js';

/**
 * Key rotation after a snapshot restore: every clone of a snapshot base wakes up with its
 * host key and lets in its client key, so a restored session is handed
 * out only once its guest trusts and presents the session's own keys, and the base's key
 * has been seen refused. The phases, and what the guest image provides for them (sshd's keys
 * under /sandbox/config, the `sbx-rekey` forced command), are in docs/firecracker.md#key-rotation.
 */

/** Where, in the guest, sshd reads the keys the rotation replaces. */
export interface GuestKeyPaths {
  authorizedKeys: string;
  hostKey: string;
  hostKeyPub: string;
  /** The base key's root access (sbx-rekey only); emptied by the rotation. */
  rootAuthorizedKeys?: string;
}

/** Where the guest image's sshd reads them in a VM: its tmpfs copy of the config drive. */
export const GUEST_KEY_PATHS: GuestKeyPaths = {
  authorizedKeys: '/sandbox/config/authorized_keys',
  hostKey: '/sandbox/config/ssh_host_ed25519_key',
  hostKeyPub: '/sandbox/config/ssh_host_ed25519_key.pub',
  rootAuthorizedKeys: '/sandbox/config/root_authorized_keys',
};

/** An open, authenticated connection to the guest, as far as the rotation needs one. */
export interface RotationConnection {
  /** Writes a file atomically with this mode; the data never passes through a command line. */
  writeFile(path: string, data: string, mode: number): Promise<void>;
  /** Makes sshd re-read its keys (SIGHUP) without dropping open connections. */
  reloadSshd(): Promise<void>;
  /** Gives the guest the session's hostname and a machine id of its own. */
  setIdentity?(identity: GuestIdentity): Promise<void>;
  /** Moves the guest to the session's address (this connection may not survive it). */
  applyNetwork?(): Promise<void>;
  close(): Promise<void>;
}

/** How a login attempt ended. Only "accepted" lets anyone in. */
export type LoginOutcome = 'accepted' | 'auth-refused' | 'host-key-mismatch' | 'unreachable';

/** The narrow view of SSH the rotation uses; the runtime implements it with ssh2. */
export interface RotationTransport<C extends RotationConnection> {
  /** Logs in with `clientPrivateKey`, accepting only `pinnedHostKey`; throws otherwise. */
  connect(clientPrivateKey: string, pinnedHostKey: string): Promise<C>;
  /** Attempts a login and reports how it ended; closes the connection if it got one. */
  tryLogin(clientPrivateKey: string, pinnedHostKey: string): Promise<LoginOutcome>;
}

/** Who a restored guest is besides its keys: it wakes up with its source's. */
export interface GuestIdentity {
  hostname: string;
  /** 32 lowercase hex digits (machine-id(5)). */
  machineId: string;
}

/** A machine id as machine-id(5) asks: 128 random bits, formatted as a version 4 UUID, in 32 lowercase hex digits. */
export function newMachineId(): string {
  const bytes = randomBytes(16);
  bytes[6] = ((bytes[6] ?? 0) & 0x0f) | 0x40;
  bytes[8] = ((bytes[8] ?? 0) & 0x3f) | 0x80;
  return bytes.toString('hex');
}

export type RotationPhase =
  'connect-template' | 'write-keys' | 'set-identity' | 'reload-sshd' | 'apply-network' | 'connect-session' | 'verify-template-refused' | 'ready';

export interface RotationPlan {
  /** The snapshot base's client private key and the host key its sshd presents. */
  snapshotBase: { clientPrivateKey: string; hostPublicKey: string };
  /** The session's freshly generated keys (transport/ssh-keys.ts). */
  session: SessionKeys;
  paths: GuestKeyPaths;
  /**
   * What root_authorized_keys holds after the rotation (default: nothing, no root login). A
   * QEMU fork gets its own rekey key there, so that it can be snapshotted and forked in turn.
   */
  rootAuthorizedKeys?: string;
  /** The session's hostname and machine id, set after the keys (absent: the guest keeps its own). */
  identity?: GuestIdentity;
  /** Attempts at the session login while sshd restarts (default 20, 100 ms apart). */
  reconnectAttempts?: number;
  reconnectDelayMs?: number;
  onPhase?: (phase: RotationPhase) => void;
}

/**
 * The rotation's phases as steps of the create they belong to (SandboxSpec.step: the bench
 * prints where a create's time goes): each phase's end is marked `rotation: <phase>`, and the
 * time before the first phase, `before` (what the caller did to reach the clone).
 */
export function rotationSteps(step: ((name: string) => void) | undefined, before: string): ((phase: RotationPhase) => void) | undefined {
  if (!step) return undefined;
  let current: RotationPhase | undefined;
  return (next) => {
    step(current ? `rotation: ${current}` : before);
    current = next;
  };
}

export class KeyRotationError extends Error {
  constructor(
    readonly phase: RotationPhase,
    message: string,
    options?: { cause?: unknown },
  ) {
    super(`key rotation failed at ${phase}: ${message}`, options);
    this.name = 'KeyRotationError';
  }
}

/**
 * Runs the rotation described above and returns the session's verified connection.
 * Nothing else should hand a restored session out.
 */
export async function rotateKeysAfterRestore<C extends RotationConnection>(transport: RotationTransport<C>, plan: RotationPlan): Promise<C> {
  let phase: RotationPhase = 'connect-template';
  const enter = (next: RotationPhase) => {
    phase = next;
    plan.onPhase?.(next);
  };
  const attempts = plan.reconnectAttempts ?? 20;
  const delayMs = plan.reconnectDelayMs ?? 100;
  const { snapshotBase, session, paths } = plan;

  let baseConnection: C | undefined;
  let sessionConnection: C | undefined;
  try {
    enter('connect-template');
    baseConnection = await transport.connect(snapshotBase.clientPrivateKey, snapshotBase.hostPublicKey);

    enter('write-keys');
    await baseConnection.writeFile(paths.hostKey, ensureNewline(session.hostPrivateKey), 0o600);
    await baseConnection.writeFile(paths.hostKeyPub, ensureNewline(session.hostPublicKey), 0o644);
    // Replaces the file, so the snapshot base's key is gone from it, not merely joined by ours.
    await baseConnection.writeFile(paths.authorizedKeys, ensureNewline(session.clientPublicKey), 0o600);
    if (paths.rootAuthorizedKeys) await baseConnection.writeFile(paths.rootAuthorizedKeys, plan.rootAuthorizedKeys ?? '', 0o600);

    if (plan.identity) {
      enter('set-identity');
      if (!baseConnection.setIdentity) throw new Error('this connection cannot set the guest identity');
      await baseConnection.setIdentity(plan.identity);
    }

    enter('reload-sshd');
    await baseConnection.reloadSshd();

    if (baseConnection.applyNetwork) {
      enter('apply-network');
      await baseConnection.applyNetwork();
    }

    enter('connect-session');
    sessionConnection = await connectWithRetries(transport, session.clientPrivateKey, session.hostPublicKey, attempts, delayMs);

    enter('verify-template-refused');
    const baseLogin = await loginOutcomeWithRetries(transport, snapshotBase.clientPrivateKey, session.hostPublicKey, attempts, delayMs);
    if (baseLogin !== 'auth-refused') {
      throw new Error(
        baseLogin === 'accepted'
          ? "the template's client key is still accepted"
          : `could not confirm that the template's client key is refused (the attempt ended: ${baseLogin})`,
      );
    }
    const oldHostKey = await loginOutcomeWithRetries(transport, session.clientPrivateKey, snapshotBase.hostPublicKey, attempts, delayMs);
    if (oldHostKey !== 'host-key-mismatch') {
      throw new Error(
        oldHostKey === 'accepted'
          ? "the guest still presents the template's host key"
          : `could not confirm that the template's host key is gone (the attempt ended: ${oldHostKey})`,
      );
    }

    await baseConnection.close();
    baseConnection = undefined;
    enter('ready');
    return sessionConnection;
  } catch (err) {
    await Promise.allSettled([baseConnection?.close(), sessionConnection?.close()]);
    if (err instanceof KeyRotationError) throw err;
    throw new KeyRotationError(phase, err instanceof Error ? err.message : String(err), { cause: err });
  }
}

async function connectWithRetries<C extends RotationConnection>(
  transport: RotationTransport<C>,
  clientPrivateKey: string,
  pinnedHostKey: string,
  attempts: number,
  delayMs: number,
): Promise<C> {
  let lastError: unknown;
  for (let attempt = 1; attempt <= attempts; attempt++) {
    try {
      return await transport.connect(clientPrivateKey, pinnedHostKey);
    } catch (err) {
      lastError = err;
      if (attempt < attempts) await sleep(delayMs);
    }
  }
  throw lastError instanceof Error ? lastError : new Error(String(lastError));
}

/** Retries only while the guest cannot be reached (sshd restarting); any answer is final. */
async function loginOutcomeWithRetries<C extends RotationConnection>(
  transport: RotationTransport<C>,
  clientPrivateKey: string,
  pinnedHostKey: string,
  attempts: number,
  delayMs: number,
): Promise<LoginOutcome> {
  let outcome: LoginOutcome = 'unreachable';
  for (let attempt = 1; attempt <= attempts; attempt++) {
    outcome = await transport.tryLogin(clientPrivateKey, pinnedHostKey);
    if (outcome !== 'unreachable') return outcome;
    if (attempt < attempts) await sleep(delayMs);
  }
  return outcome;
}

function ensureNewline(text: string): string {
  return text.endsWith('\n') ? text : text + '\n';
}
