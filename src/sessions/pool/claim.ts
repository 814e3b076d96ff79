import type { SettleOptions } from '../../computer/computer-tool.js';
import { authorizeOnly, generateClientKey, publicKeyBlob, replaceSessionKeyFiles } from '../../transport/ssh-keys.js';
import { attachDesktop, configDirOf, sessionDirOf } from '../boot.js';
import type { PooledSandbox } from './warm-pool.js';

export interface ClaimContext {
  stateDir: string;
  display: number;
  displayServer?: 'init' | 'session';
  settle: SettleOptions;
  sshReconnectGiveUpMs?: number;
  /** A pooled sandbox that is not ready again within this is given up (and booted cold). */
  timeoutMs: number;
}

/**
 * Turns a pooled sandbox into the session's own, before the session is returned:
 *  1. a new ephemeral client key pair is made for the session;
 *  2. authorized_keys in the host-side config dir is replaced (one rename) by a file listing
 *     only the new key, so from here on sshd refuses the pool's key; the pool's private key
 *     in the session dir is replaced too. The pool kept no connection open (see
 *     bootPooledSandbox), so the key was its only access, and it is gone;
 *  3. the session's connection is opened with the new key and the host key pinned when the
 *     sandbox was booted: the handshake checks it again, and a guest presenting any other
 *     key is refused (HostKeyMismatchError), the claim fails and the caller destroys it;
 *  4. the desktop is attached to that connection: with the pool's helper launcher (computer/
 *     warm-helpers.ts) the session is ready at once, its input helper and grabber forked from
 *     the launcher on channels of this connection in the background (the display answered in
 *     the pool, as a resumed session's did before its pause); without one, once the display
 *     answers a helper started on it, as after a cold boot.
 * Only containers can do step 2 (their config dir is bind-mounted as a directory, see
 * RuntimeCapabilities.configDirIsLive); the pool is off on the other runtimes.
 */
export async function claimPooledSandbox(pooled: PooledSandbox, ctx: ClaimContext): Promise<void> {
  const { session, hostPublicKey } = pooled;
  const sandbox = session.sandbox;
  if (!sandbox?.isAlive()) throw new Error('the pooled sandbox is no longer running');
  const client = generateClientKey(session.id);
  session.steps.mark('claim: key made');
  // The guest's half first: the handshake needs it; the session dir's files are written meanwhile.
  const keyFiles = replaceSessionKeyFiles(sessionDirOf(ctx.stateDir, session.id), client);
  keyFiles.catch(() => undefined); // awaited below
  await authorizeOnly(configDirOf(ctx.stateDir, session.id), client.public);
  session.steps.mark('claim: key swapped');
  await attachDesktop(
    session,
    sandbox,
    client.private,
    publicKeyBlob(hostPublicKey),
    Date.now() + ctx.timeoutMs,
    { ...ctx, steps: session.steps },
    pooled.warmHelpers ? 'background' : 'await',
    pooled.warmHelpers,
  );
  await keyFiles;
}
