import assert from 'node:assert/strict';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { qemuSettingsFromEnv } from '../src/runtimes/qemu/settings.js';
import { GUEST_USER, renderSettings, CONFIG_FILES } from '../src/guest/contract.js';
import { builtImage } from './helpers/firecracker/emulator-workspace.js';
import { AddressPool, type AddressLease } from '../src/network/address-pool.js';
import { ResourceNames } from '../src/network/names.js';
import { createSandboxNetwork, type AttachedNetwork } from '../src/network/netns.js';
import { KeyRotationError, type RotationPhase } from '../src/runtimes/firecracker/ssh-keys/key-rotation.js';
import { rotateClone, snapshotBaseAddress } from '../src/runtimes/firecracker/snapshot/clone-rotation.js';
import { writeBaseRootKey } from '../src/runtimes/firecracker/snapshot/base-config.js';
import { QemuRuntime } from '../src/runtimes/qemu/qemu-runtime.js';
import { newSessionId } from '../src/sessions/session.js';
import { generateSessionKeys, publicKeyBlob, writeSessionKeys, type SessionKeys } from '../src/transport/ssh-keys.js';
import { guestTransport, type GuestTransport, HostKeyMismatchError, SshAuthenticationError } from '../src/transport/index.js';
import { CleanupStack } from '../src/util/cleanup-stack.js';
import { run } from '../src/util/exec.js';
import { removeEmptyPrefixCgroups, TEST_PREFIX, TEST_SUBNET } from './helpers/orchestrator.js';

/**
 * The key rotation a clone restored from a Firecracker snapshot goes through, on a real
 * guest: a VM (qemu runtime; no KVM needed) booted exactly as a template is, with the
 * template's keys, the template's link-local address and the template key's root access to
 * sbx-rekey, sitting in a session's netns as a clone does. rotateClone must leave it on the
 * session's address, with the session's keys, and without any way in for the template key.
 */
const NAMES = new ResourceNames(TEST_PREFIX);
const BASE_ADDRESS = snapshotBaseAddress(TEST_PREFIX);

describe('key rotation of a snapshot clone, on a real guest', () => {
  let workDir: string;
  const cleanup = new CleanupStack();
  const pool = new AddressPool(TEST_SUBNET);
  let snapshotBase: SessionKeys;
  let session: SessionKeys;
  let lease: AddressLease;
  let network: AttachedNetwork;

  /** A login as this user with these keys at this address: what sshd answers. */
  async function login(host: string, username: string, privateKey: string, hostPublicKey: string, timeoutMs = 5_000): Promise<GuestTransport> {
    const connection = guestTransport({ endpoint: { host, port: 22 }, username, privateKey, pinnedHostKey: publicKeyBlob(hostPublicKey) });
    try {
      await connection.open(timeoutMs);
      return connection;
    } catch (err) {
      connection.close();
      throw err;
    }
  }

  /** Reaches the clone at the template's address, as rotateClone does, for a check of our own. */
  async function atTemplateAddress<T>(task: () => Promise<T>): Promise<T> {
    await run(['ip', 'addr', 'add', `${BASE_ADDRESS.gateway}/30`, 'dev', network.hostInterface]);
    try {
      return await task();
    } finally {
      await run(['ip', 'addr', 'del', `${BASE_ADDRESS.gateway}/30`, 'dev', network.hostInterface], { allowFailure: true });
    }
  }

  before(async () => {
    const image = await builtImage();
    workDir = await mkdtemp(path.join(os.tmpdir(), 'fc-rotation-'));
    const runtime = await QemuRuntime.create(NAMES, qemuSettingsFromEnv(process.env));
    const sessionId = newSessionId();
    const sessionDir = path.join(workDir, sessionId);
    const configDir = path.join(sessionDir, 'config');
    snapshotBase = generateSessionKeys('template');
    session = generateSessionKeys(sessionId);
    // The template's config: its keys, its root key for sbx-rekey, its address.
    await writeSessionKeys(sessionDir, configDir, snapshotBase);
    await writeBaseRootKey(configDir, snapshotBase.clientPublicKey);
    await writeFile(
      path.join(configDir, CONFIG_FILES.settings),
      renderSettings({
        SANDBOX_ID: 'template00',
        SANDBOX_HOSTNAME: 'sbx-template',
        SANDBOX_DISPLAY: 99,
        SANDBOX_WIDTH: 1024,
        SANDBOX_HEIGHT: 768,
        SANDBOX_DEPTH: 24,
        SANDBOX_NET_CONFIGURE: 1,
        SANDBOX_ADDRESS: `${BASE_ADDRESS.guest}/${BASE_ADDRESS.prefixLength}`,
        SANDBOX_GATEWAY: BASE_ADDRESS.gateway,
        SANDBOX_TRANSPORT: 'tcp',
      }),
    );
    // The session's netns, leased address and TAP, as a clone gets them.
    lease = pool.lease();
    network = await createSandboxNetwork(NAMES, sessionId, lease, cleanup, 'tap');
    await runtime.start(
      { sessionId, image, sessionDir, configDir, hostname: 'sbx-template', network, memoryMiB: 768, pidsLimit: 256, logsDir: path.join(workDir, 'logs') },
      cleanup,
    );
    // Up (under TCG this takes a while): the template's key gets in at the template's address.
    await atTemplateAddress(async () =>
      (await login(BASE_ADDRESS.guest, GUEST_USER, snapshotBase.clientPrivateKey, snapshotBase.hostPublicKey, 150_000)).close(),
    );
  });

  after(async () => {
    await cleanup.run();
    await rm(workDir, { recursive: true, force: true });
    await removeEmptyPrefixCgroups();
  });

  it('the template key reaches root only through sbx-rekey, which refuses anything off its list', async () => {
    await atTemplateAddress(async () => {
      const root = await login(BASE_ADDRESS.guest, 'root', snapshotBase.clientPrivateKey, snapshotBase.hostPublicKey);
      try {
        const shell = await root.exec('id; cat /etc/shadow');
        assert.equal(shell.exitCode, 2, 'no shell: the forced command runs instead');
        assert.match(shell.stderr.toString(), /sbx-rekey: unknown command 'id;'/);
        const traversal = await root.exec('write ../../etc/passwd 644', { stdin: 'root::0:0::/root:/bin/bash\n' });
        assert.equal(traversal.exitCode, 2);
        assert.match(traversal.stderr.toString(), /refusing to write/);
        const badNetwork = await root.exec('network 1.2.3.4/30;reboot 1.2.3.1', {});
        assert.equal(badNetwork.exitCode, 2);
        // The identity and the MAC: checked in the guest too, refused before anything changes.
        for (const command of [
          'identity sbx-x;reboot 0123456789abcdef0123456789abcdef',
          'identity sbx-ok 00000000000000000000000000000000',
          'identity sbx-ok ../../etc/shadow',
          'identity sbx-ok',
          'network 1.2.3.6/30 1.2.3.5 02:00:00:00:00:01;reboot',
          'network 1.2.3.6/30 1.2.3.5 ff:ff:ff:ff:ff:ff',
        ]) {
          const refused = await root.exec(command);
          assert.equal(refused.exitCode, 2, command);
          assert.match(refused.stderr.toString(), /^sbx-rekey: /, command);
        }
        assert.equal((await root.exec('identity sbx-template0 0123456789abcdef0123456789abcdef')).exitCode, 0, 'a good one is taken');
      } finally {
        root.close();
      }
      // The session's key is not let in before the rotation.
      await assert.rejects(login(BASE_ADDRESS.guest, GUEST_USER, session.clientPrivateKey, snapshotBase.hostPublicKey), SshAuthenticationError);
    });
  });

  it('rotateClone moves the clone to the session address with the session keys, and shuts the template out', async () => {
    const phases: RotationPhase[] = [];
    await rotateClone({
      at: BASE_ADDRESS,
      hostInterface: network.hostInterface,
      snapshotBase,
      session,
      lease,
      hostname: 'sbx-clone00001',
      onPhase: (p) => phases.push(p),
    });
    assert.deepEqual(phases, [
      'connect-template',
      'write-keys',
      'set-identity',
      'reload-sshd',
      'apply-network',
      'connect-session',
      'verify-template-refused',
      'ready',
    ]);

    // Checked independently of the rotation's own verification:
    const guest = await login(lease.guest, GUEST_USER, session.clientPrivateKey, session.hostPublicKey);
    try {
      const facts = (await guest.exec('ip -o -4 addr show dev eth0; ip route show default; stat -c %s /sandbox/config/root_authorized_keys')).stdout.toString();
      assert.match(facts, new RegExp(`inet ${lease.guest.replace(/\./g, '\\.')}/30`));
      assert.doesNotMatch(facts, new RegExp(BASE_ADDRESS.guest.replace(/\./g, '\\.')));
      assert.match(facts, new RegExp(`default via ${lease.gateway.replace(/\./g, '\\.')}`));
      assert.match(facts, /^0$/m, 'the template root key is gone');
      // Its own name and a new machine id (the one before was the template's: the first test set it).
      const [hostname, machineId] = (await guest.exec('hostname; cat /etc/machine-id')).stdout.toString().trim().split('\n');
      assert.equal(hostname, 'sbx-clone00001');
      assert.match(machineId ?? '', /^[0-9a-f]{32}$/);
      assert.notEqual(machineId, '0123456789abcdef0123456789abcdef');
    } finally {
      guest.close();
    }
    for (const user of ['root', GUEST_USER]) {
      await assert.rejects(login(lease.guest, user, snapshotBase.clientPrivateKey, session.hostPublicKey), SshAuthenticationError, `template key as ${user}`);
    }
    await assert.rejects(
      login(lease.guest, GUEST_USER, session.clientPrivateKey, snapshotBase.hostPublicKey),
      HostKeyMismatchError,
      'the template host key is gone',
    );
    const ip = await run(['ip', '-o', 'addr', 'show', 'dev', network.hostInterface]);
    assert.doesNotMatch(ip.stdout, new RegExp(BASE_ADDRESS.gateway.replace(/\./g, '\\.')), 'the temporary route to the template address is gone');
  });

  it('a second rotation with the template key fails at its first phase, handing nothing out', async () => {
    await assert.rejects(
      rotateClone({ at: BASE_ADDRESS, hostInterface: network.hostInterface, snapshotBase, session: generateSessionKeys('other'), lease }),
      (err: unknown) => err instanceof KeyRotationError && err.phase === 'connect-template',
    );
    // Nothing answers at the template address any more, so that alone fails for want of a
    // route. Where the clone does answer (its session address, which rotateClone routes to
    // itself when told it is the template's), the template key must fail for the key: the
    // template's host key is no longer presented, and the template's client key is refused
    // as root even by an attacker who pins the new host key.
    const sessionAddress = { guest: lease.guest, gateway: lease.gateway, prefixLength: lease.prefixLength };
    const gatewayCidr = `${lease.gateway}/${lease.prefixLength}`;
    const hadGateway = (await run(['ip', '-o', 'addr', 'show', 'dev', network.hostInterface])).stdout.includes(`inet ${gatewayCidr} `);
    if (hadGateway) await run(['ip', 'addr', 'del', gatewayCidr, 'dev', network.hostInterface]);
    const failures: unknown[] = [];
    try {
      for (const keys of [snapshotBase, { ...snapshotBase, hostPublicKey: session.hostPublicKey }]) {
        await rotateClone({ at: sessionAddress, hostInterface: network.hostInterface, snapshotBase: keys, session: generateSessionKeys('other'), lease }).then(
          () => assert.fail('a rotation with the template key succeeded'),
          (err: unknown) => failures.push(err),
        );
      }
    } finally {
      if (hadGateway) await run(['ip', 'addr', 'add', gatewayCidr, 'dev', network.hostInterface], { allowFailure: true });
    }
    const [hostKeyGone, clientKeyRefused] = failures;
    assert.ok(hostKeyGone instanceof KeyRotationError && hostKeyGone.phase === 'connect-template', String(hostKeyGone));
    assert.ok(hostKeyGone.cause instanceof HostKeyMismatchError, `the template host key is not presented: ${String(hostKeyGone.cause)}`);
    assert.ok(clientKeyRefused instanceof KeyRotationError && clientKeyRefused.phase === 'connect-template', String(clientKeyRefused));
    assert.ok(clientKeyRefused.cause instanceof SshAuthenticationError, `the template client key is refused: ${String(clientKeyRefused.cause)}`);
    // The control: at that address, in that state, the session's own key still gets in.
    (await login(lease.guest, GUEST_USER, session.clientPrivateKey, session.hostPublicKey)).close();
  });
});
