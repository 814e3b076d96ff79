import path from 'node:path';
import { GUEST_USER } from '../../../guest/contract.js';
import { publicKeyBlob } from '../../../transport/ssh-keys.js';
import { guestTransport, type GuestTransport, HostKeyMismatchError, SshAuthenticationError, type GuestEndpoint } from '../../../transport/index.js';
import type { GuestIdentity, LoginOutcome, RotationConnection, RotationTransport } from './key-rotation.js';

/** The user the base key logs in as: root, limited by sshd to the forced sbx-rekey. */
const REKEY_USER = 'root';
/** The only directory sbx-rekey writes to. */
const REKEY_DIR = '/sandbox/config';
const CONNECT_TIMEOUT_MS = 5_000;
const REKEY_TIMEOUT_MS = 10_000;
/** What sbx-rekey accepts (it checks them again): a DNS label, machine-id(5)'s form, a locally administered MAC. */
const HOSTNAME_PATTERN = /^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$/;
const MACHINE_ID_PATTERN = /^[0-9a-f]{32}$/;
const MAC_PATTERN = /^02(:[0-9a-f]{2}){5}$/;
const IPV4_CIDR = /^\d{1,3}(\.\d{1,3}){3}\/\d{1,2}$/;
const IPV4 = /^\d{1,3}(\.\d{1,3}){3}$/;

export interface SshRotationOptions {
  /** Where the clone answers as the snapshot base did: the snapshot base's address, routed for the rotation. */
  baseEndpoint: GuestEndpoint;
  /** Where the session's guest answers once moved. */
  sessionEndpoint: GuestEndpoint;
  /** The snapshot base's client key: it logs in as root, to sbx-rekey. */
  baseClientPrivateKey: string;
  baseHostPublicKey: string;
  /** The session's address and gateway (and MAC), given to `sbx-rekey network` (absent: a clone without a NIC stays without one). */
  network?: RekeyNetwork;
  /**
   * Run on the host once `sbx-rekey network` answered (the guest moves a moment later): a QEMU
   * fork's netns stops answering for the gateway (fork.ts).
   */
  afterNetwork?: () => Promise<void>;
  /** How long one login may take (default 5 s; a QEMU fork under TCG, just resumed, answers slower). */
  connectTimeoutMs?: number;
}

/**
 * key-rotation.ts's transport, with ssh2 and the guest's sbx-rekey. Which address and user a
 * login uses follows from its keys: the base key pinning the snapshot base's host key is the
 * first, rotating connection (snapshot base address, root); every other login, including the
 * checks that the snapshot base's access is gone, goes to the session's address, and the snapshot base
 * key still logs in as root there, the access the rotation must have removed. Over vsock both
 * endpoints are the clone's vsock socket: only the keys differ.
 */
export class SshRotationTransport implements RotationTransport<SshRotationConnection> {
  constructor(private readonly options: SshRotationOptions) {}

  async connect(clientPrivateKey: string, pinnedHostKey: string): Promise<SshRotationConnection> {
    const isBaseKey = clientPrivateKey === this.options.baseClientPrivateKey;
    const rotating = isBaseKey && pinnedHostKey.trim() === this.options.baseHostPublicKey.trim();
    const connection = guestTransport({
      endpoint: rotating ? this.options.baseEndpoint : this.options.sessionEndpoint,
      username: isBaseKey ? REKEY_USER : GUEST_USER,
      privateKey: clientPrivateKey,
      pinnedHostKey: publicKeyBlob(pinnedHostKey),
    });
    try {
      await connection.open(this.options.connectTimeoutMs ?? CONNECT_TIMEOUT_MS);
    } catch (err) {
      connection.close();
      throw err;
    }
    return new SshRotationConnection(connection, rotating ? this.options.network : undefined, rotating ? this.options.afterNetwork : undefined);
  }

  async tryLogin(clientPrivateKey: string, pinnedHostKey: string): Promise<LoginOutcome> {
    try {
      const connection = await this.connect(clientPrivateKey, pinnedHostKey);
      await connection.close();
      return 'accepted';
    } catch (err) {
      if (err instanceof HostKeyMismatchError) return 'host-key-mismatch';
      if (err instanceof SshAuthenticationError) return 'auth-refused';
      return 'unreachable';
    }
  }
}

export interface RekeyNetwork {
  address: string;
  gateway: string;
  /** The NIC's new MAC (QEMU: the fork's own, as its command line says); absent: the guest keeps its own. */
  mac?: string;
}

export class SshRotationConnection implements RotationConnection {
  readonly applyNetwork: (() => Promise<void>) | undefined;

  constructor(
    /** The open connection; the session's one is what the rotation hands back. */
    readonly connection: GuestTransport,
    network: RekeyNetwork | undefined,
    afterNetwork?: () => Promise<void>,
  ) {
    this.applyNetwork = network
      ? async () => {
          await this.rekey(networkCommand(network));
          await afterNetwork?.();
        }
      : undefined;
  }

  /** Words of sbx-rekey's fixed command, each checked here first (and again in the guest). */
  async setIdentity(identity: GuestIdentity): Promise<void> {
    const { hostname, machineId } = identity;
    if (!HOSTNAME_PATTERN.test(hostname)) throw new Error(`not a hostname: ${JSON.stringify(hostname)}`);
    if (!MACHINE_ID_PATTERN.test(machineId) || /^0+$/.test(machineId)) throw new Error(`not a machine id: ${JSON.stringify(machineId)}`);
    return this.rekey(`identity ${hostname} ${machineId}`);
  }

  async writeFile(file: string, data: string, mode: number): Promise<void> {
    if (path.dirname(file) !== REKEY_DIR) throw new Error(`sbx-rekey writes only in ${REKEY_DIR}, not ${file}`);
    if (mode !== 0o600 && mode !== 0o644) throw new Error(`sbx-rekey writes modes 600 and 644 only, not ${mode.toString(8)}`);
    // The name is one of sbx-rekey's fixed list (it refuses others); the data is stdin only.
    await this.rekey(`write ${path.basename(file)} ${mode.toString(8)}`, data);
  }

  reloadSshd(): Promise<void> {
    return this.rekey('reload-sshd');
  }

  async close(): Promise<void> {
    this.connection.close();
  }

  private async rekey(command: string, stdin?: string): Promise<void> {
    const res = await this.connection.exec(command, { stdin: stdin ?? '', timeoutMs: REKEY_TIMEOUT_MS });
    if (res.exitCode !== 0) throw new Error(`sbx-rekey ${command.split(' ')[0]} failed (${res.exitCode}): ${res.stderr.toString('utf8').trim()}`);
  }
}

function networkCommand({ address, gateway, mac }: RekeyNetwork): string {
  if (!IPV4_CIDR.test(address) || !IPV4.test(gateway)) throw new Error(`not an address and gateway: ${JSON.stringify([address, gateway])}`);
  if (mac !== undefined && !MAC_PATTERN.test(mac)) throw new Error(`not a MAC of ours: ${JSON.stringify(mac)}`);
  return ['network', address, gateway, ...(mac ? [mac] : [])].join(' ');
}
