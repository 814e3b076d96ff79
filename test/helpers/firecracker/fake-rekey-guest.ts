import type { SessionKeys } from '../../../src/transport/ssh-keys.js';
import type { GuestKeyPaths, LoginOutcome, RotationConnection, RotationTransport } from '../../../src/runtimes/firecracker/ssh-keys/key-rotation.js';

/**
 * An in-memory guest for the key rotation logic: a file system and an sshd that behaves as
 * OpenSSH's does where it matters here. It reads every AuthorizedKeysFile at each login, and
 * reads its host key only at start and on SIGHUP. Keys are stand-in strings: a private key
 * "PRIVATE:<name>" belongs to the public key "ssh-ed25519 <name>".
 *
 * Its knobs make the faulty guests the rotation must refuse to hand out.
 */
export class FakeRekeyGuest implements RotationTransport<FakeConnection> {
  readonly files = new Map<string, { data: string; mode: number }>();
  /** sshd_config's AuthorizedKeysFile entries. */
  authorizedKeysFiles: string[];
  /** Host keys sshd presents (loaded at start and on reload). */
  presentedHostKeys: string[];
  /** Everything that happened, in order, for assertions about sequence. */
  readonly events: string[] = [];
  readonly openConnections = new Set<FakeConnection>();

  /** Faults. */
  reloadIgnored = false;
  reloadKeepsOldHostKey = false;
  failWritesTo: string | undefined;
  /** Logins that find sshd not listening, right after a reload (it re-executes itself). */
  unreachableLoginsAfterReload = 0;
  /** The guest is gone (crashed, network down). */
  unreachable = false;

  private pendingUnreachable = 0;

  constructor(
    readonly paths: GuestKeyPaths,
    template: { clientPublicKey: string; hostPrivateKey: string },
  ) {
    this.files.set(paths.authorizedKeys, { data: template.clientPublicKey + '\n', mode: 0o600 });
    this.files.set(paths.hostKey, { data: template.hostPrivateKey + '\n', mode: 0o600 });
    this.authorizedKeysFiles = [paths.authorizedKeys];
    if (paths.rootAuthorizedKeys) {
      // The template key's root access to sbx-rekey: a login with it is accepted too.
      this.files.set(paths.rootAuthorizedKeys, { data: template.clientPublicKey + '\n', mode: 0o600 });
      this.authorizedKeysFiles.push(paths.rootAuthorizedKeys);
    }
    this.presentedHostKeys = [publicOf(template.hostPrivateKey)];
  }

  async connect(clientPrivateKey: string, pinnedHostKey: string): Promise<FakeConnection> {
    const outcome = this.login(clientPrivateKey, pinnedHostKey);
    this.events.push(`connect ${nameOf(clientPrivateKey)} pin ${nameOf(pinnedHostKey)}: ${outcome}`);
    if (outcome !== 'accepted') throw new Error(`login failed: ${outcome}`);
    const connection = new FakeConnection(this, nameOf(clientPrivateKey));
    this.openConnections.add(connection);
    return connection;
  }

  async tryLogin(clientPrivateKey: string, pinnedHostKey: string): Promise<LoginOutcome> {
    const outcome = this.login(clientPrivateKey, pinnedHostKey);
    this.events.push(`try ${nameOf(clientPrivateKey)} pin ${nameOf(pinnedHostKey)}: ${outcome}`);
    return outcome;
  }

  /** sshd's answer to a login with this client key by a client pinning this host key. */
  login(clientPrivateKey: string, pinnedHostKey: string): LoginOutcome {
    if (this.unreachable) return 'unreachable';
    if (this.pendingUnreachable > 0) {
      this.pendingUnreachable--;
      return 'unreachable';
    }
    // The server proves its host key before the client authenticates.
    if (!this.presentedHostKeys.includes(pinnedHostKey.trim())) return 'host-key-mismatch';
    const clientPublic = publicOf(clientPrivateKey);
    const authorized = this.authorizedKeysFiles.some((file) => (this.files.get(file)?.data ?? '').split('\n').some((line) => line.trim() === clientPublic));
    return authorized ? 'accepted' : 'auth-refused';
  }

  reload(): void {
    if (this.reloadIgnored) return;
    const hostKey = this.files.get(this.paths.hostKey)?.data.trim();
    const loaded = hostKey ? [publicOf(hostKey)] : [];
    this.presentedHostKeys = this.reloadKeepsOldHostKey ? [...this.presentedHostKeys, ...loaded] : loaded;
    this.pendingUnreachable = this.unreachableLoginsAfterReload;
  }
}

export class FakeConnection implements RotationConnection {
  closed = false;

  constructor(
    private readonly guest: FakeRekeyGuest,
    /** Which client key logged in on this connection. */
    readonly clientKeyName: string,
  ) {}

  async writeFile(path: string, data: string, mode: number): Promise<void> {
    this.assertOpen();
    if (this.guest.failWritesTo === path) throw new Error(`write ${path}: permission denied`);
    this.guest.files.set(path, { data, mode });
    this.guest.events.push(`write ${path} ${mode.toString(8)} by ${this.clientKeyName}`);
  }

  async reloadSshd(): Promise<void> {
    this.assertOpen();
    this.guest.events.push(`reload by ${this.clientKeyName}`);
    this.guest.reload();
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    this.guest.openConnections.delete(this);
    this.guest.events.push(`close ${this.clientKeyName}`);
  }

  private assertOpen(): void {
    if (this.closed) throw new Error('connection is closed');
  }
}

/** A stand-in key pair set: "PRIVATE:<name>-client" / "ssh-ed25519 <name>-client", and the same for the host. */
export function fakeKeys(name: string): SessionKeys {
  return {
    clientPrivateKey: `PRIVATE:${name}-client`,
    clientPublicKey: `ssh-ed25519 ${name}-client`,
    hostPrivateKey: `PRIVATE:${name}-host`,
    hostPublicKey: `ssh-ed25519 ${name}-host`,
  };
}

function publicOf(privateKey: string): string {
  return privateKey.trim().replace(/^PRIVATE:/, 'ssh-ed25519 ');
}

function nameOf(key: string): string {
  return key.trim().replace(/^(PRIVATE:|ssh-ed25519 )/, '');
}
