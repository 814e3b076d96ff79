import { setTimeout as sleep } from 'node:timers/promises';
import type { SessionKeys } from '../../../transport/keys.js';

/**
 * Key rotation after a snapshot restore.
 *
 * Why: a session started from a snapshot wakes up as a copy of the base VM, memory and
 * all. Its sshd holds the snapshot base's host key, and the snapshot base's client key is what it
 * lets in. Every clone of the snapshot base shares both, and the config drive the session made
 * for it is never read (the guest read its config at the snapshot base's boot). So before a
 * restored session is handed out, its guest must be made to trust only the session's own
 * client key and present only the session's own host key, and we must have seen it do so.
 *
 * The sequence (each phase is a value of RotationPhase, reported through `onPhase`):
 *  1. connect-template  log in with the snapshot base's client key, pinning the snapshot base's host
 *                       key. Failing here means the snapshot is not the snapshot base we think.
 *  2. write-keys        over that connection, install the session's host key (private, then
 *                       public) and then the session's authorized_keys, which replaces the
 *                       snapshot base's, and empty root_authorized_keys (the base key's root
 *                       access): from this moment the base key is refused for new logins
 *                       (sshd reads both files at each login). The files travel as data (the
 *                       guest helper's standard input), never inside a command string, and
 *                       are written atomically (temporary file, then rename).
 *  3. reload-sshd       SIGHUP: sshd re-executes itself and presents the new host key to new
 *                       connections; connections already open stay up.
 *     apply-network     (when the connection offers it) move the guest to the session's own
 *                       address: a clone wakes up with the snapshot base's. The snapshot base
 *                       connection runs over the old address and dies with it.
 *  4. connect-session   log in with the session's client key, pinning the session's host
 *                       key, retrying briefly while sshd restarts. This is the connection
 *                       the session will keep.
 *  5. verify-template-refused
 *                       try the snapshot base's client key (pinning the new host key, so the
 *                       attempt reaches authentication): it must be refused. Then try the
 *                       session key pinning the snapshot base's host key: the guest must no
 *                       longer present it. Anything else, including "could not tell",
 *                       fails the rotation.
 *  6. ready             close the snapshot base connection; only now is the session connection
 *                       returned, and only then may the session be handed out.
 *
 * On any failure the snapshot base connection is closed, the session connection (if opened) is
 * closed, and a KeyRotationError naming the phase is thrown: the caller destroys the VM. A
 * half-rotated guest is never handed out.
 *
 * What the guest must provide (not yet in the guest image; see the runtime's index.ts):
 * sshd reading its HostKey and AuthorizedKeysFile from a writable, root-owned place (e.g.
 * /run/sandbox/ssh, filled from the config drive at boot), and a way for the rotation
 * connection to write there and SIGHUP sshd (for example a forced-command key of the
 * snapshot base that runs a small root helper reading the files from standard input).
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

export type RotationPhase =
  | 'connect-template'
  | 'write-keys'
  | 'reload-sshd'
  | 'apply-network'
  | 'connect-session'
  | 'verify-template-refused'
  | 'ready';

export interface RotationPlan {
  /** The snapshot base's client private key and the host key its sshd presents. */
  snapshotBase: { clientPrivateKey: string; hostPublicKey: string };
  /** The session's freshly generated keys (transport/keys.ts). */
  session: SessionKeys;
  paths: GuestKeyPaths;
  /** Attempts at the session login while sshd restarts (default 20, 100 ms apart). */
  reconnectAttempts?: number;
  reconnectDelayMs?: number;
  onPhase?: (phase: RotationPhase) => void;
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
export async function rotateKeysAfterRestore<C extends RotationConnection>(
  transport: RotationTransport<C>,
  plan: RotationPlan,
): Promise<C> {
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
    if (paths.rootAuthorizedKeys) await baseConnection.writeFile(paths.rootAuthorizedKeys, '', 0o600);

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
