import type { Client } from 'ssh2';

/** What this module touches of ssh2's protocol object (ssh2 1.x, lib/protocol/Protocol.js). */
interface SigningKey {
  type: string;
  sign(data: Buffer): Buffer | Error;
}
type SignCallback = (data: Buffer, done: (signature: Buffer) => void) => void;
interface ClientProtocol {
  authPK(username: string, key: SigningKey, keyAlgo?: string, cbSign?: SignCallback): void;
}

/**
 * Makes ssh2 send the session key's signed login request at once. ssh2 first asks whether sshd
 * would take the key (a request without a signature, answered USERAUTH_PK_OK) and signs only
 * then: a round trip RFC 4252 section 7 leaves optional, and we hold the only key sshd takes.
 * sshd answers every key request only after its minimum-time delay for logins (5-9 ms), so the
 * query's answer came late too (measured: the handshake 2-3 ms shorter, issue 27).
 *
 * Call it right after `client.connect()` (which makes the protocol object). Only ed25519 keys
 * (the sessions' own) are signed early; anything else, a key that fails to sign, or an ssh2
 * without this object keeps ssh2's own two steps. A refused signed request fails the login as a refused query did.
 */
export function signLoginAtOnce(client: Client): void {
  const protocol = (client as unknown as { _protocol?: Partial<ClientProtocol> })._protocol;
  if (!protocol || typeof protocol.authPK !== 'function') return;
  const authPK = protocol.authPK.bind(protocol);
  protocol.authPK = (username, key, keyAlgo, cbSign) => {
    if (cbSign || key?.type !== 'ssh-ed25519' || typeof key.sign !== 'function') return authPK(username, key, keyAlgo, cbSign);
    let signed = false;
    authPK(username, key, keyAlgo, (data, done) => {
      const signature = key.sign(data);
      if (signature instanceof Error) return; // nothing sent: ssh2's own steps below report it
      signed = true;
      done(signature);
    });
    if (!signed) authPK(username, key, keyAlgo);
  };
}
