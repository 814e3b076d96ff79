import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import {
  newMachineId,
  rotateKeysAfterRestore,
  type GuestIdentity,
  type RotationConnection,
  type RotationPhase,
  type RotationTransport,
} from '../../src/runtimes/firecracker/ssh-keys/key-rotation.js';
import { SshRotationConnection } from '../../src/runtimes/firecracker/ssh-keys/ssh-rotation-transport.js';
import type { GuestTransport } from '../../src/transport/index.js';
import { generateSessionKeys } from '../../src/transport/ssh-keys.js';

/**
 * A fork's identity (docs/snapshots.md): the rotation gives the restored guest the session's
 * hostname and a new machine id, and moves its NIC to the session's MAC, through sbx-rekey's
 * fixed words; each value is checked on the host before it is sent (and again in the guest:
 * test/firecracker-rotation.test.ts), so nothing else ever becomes part of the command.
 */

/** A connection whose exec records the commands sbx-rekey would get, and answers 0. */
function recordingConnection(network?: { address: string; gateway: string; mac?: string }): { connection: SshRotationConnection; commands: string[] } {
  const commands: string[] = [];
  const transport = {
    exec: async (command: string) => {
      commands.push(command);
      return { exitCode: 0, stdout: Buffer.alloc(0), stderr: Buffer.alloc(0) };
    },
    close: () => undefined,
  } as unknown as GuestTransport;
  return { connection: new SshRotationConnection(transport, network), commands };
}

describe('the identity step of a rotation', () => {
  it('sends the hostname and machine id as sbx-rekey words, and the MAC with the network', async () => {
    const machineId = newMachineId();
    const { connection, commands } = recordingConnection({ address: '10.242.0.6/30', gateway: '10.242.0.5', mac: '02:0a:1b:2c:3d:4e' });
    await connection.setIdentity({ hostname: 'sbx-abcdef1234', machineId });
    await connection.applyNetwork?.();
    assert.deepEqual(commands, [`identity sbx-abcdef1234 ${machineId}`, 'network 10.242.0.6/30 10.242.0.5 02:0a:1b:2c:3d:4e']);
    const { connection: withoutMac, commands: sent } = recordingConnection({ address: '10.242.0.6/30', gateway: '10.242.0.5' });
    await withoutMac.applyNetwork?.();
    assert.deepEqual(sent, ['network 10.242.0.6/30 10.242.0.5'], 'a clone without a MAC of its own keeps the one it has');
  });

  it('refuses anything but a hostname, a machine id and a MAC of ours, sending nothing', async () => {
    const { connection, commands } = recordingConnection();
    const bad: GuestIdentity[] = [
      { hostname: 'sbx-x;reboot', machineId: newMachineId() },
      { hostname: 'sbx x', machineId: newMachineId() },
      { hostname: '-sbx', machineId: newMachineId() },
      { hostname: 'a'.repeat(64), machineId: newMachineId() },
      { hostname: 'sbx-ok', machineId: '0'.repeat(32) },
      { hostname: 'sbx-ok', machineId: 'ABCDEF0123456789ABCDEF0123456789' },
      { hostname: 'sbx-ok', machineId: `${newMachineId()} x` },
    ];
    for (const identity of bad) await assert.rejects(connection.setIdentity(identity), /not a/, JSON.stringify(identity));
    for (const mac of ['02:0a:1b:2c:3d', '03:0a:1b:2c:3d:4e', '02:0a:1b:2c:3d:4e;x', '02:0A:1B:2C:3D:4E']) {
      const { connection: moving, commands: sent } = recordingConnection({ address: '10.242.0.6/30', gateway: '10.242.0.5', mac });
      await assert.rejects(moving.applyNetwork?.() ?? Promise.resolve(), /not a MAC/, mac);
      assert.deepEqual(sent, []);
    }
    assert.deepEqual(commands, []);
  });

  it('new machine ids: 32 lowercase hex digits, a version 4 UUID, never the same', () => {
    const ids = Array.from({ length: 200 }, () => newMachineId());
    for (const id of ids) assert.match(id, /^[0-9a-f]{12}4[0-9a-f]{3}[89ab][0-9a-f]{15}$/);
    assert.equal(new Set(ids).size, ids.length);
  });

  it('the rotation sets the identity after the keys and before sshd reloads; a failure there hands nothing out', async () => {
    const base = generateSessionKeys('base');
    const session = generateSessionKeys('session');
    const calls: string[] = [];
    const makeTransport = (failIdentity: boolean): RotationTransport<RotationConnection> => ({
      connect: async () => ({
        writeFile: async (file) => void calls.push(`write ${file}`),
        setIdentity: async (identity) => {
          calls.push(`identity ${identity.hostname}`);
          if (failIdentity) throw new Error('sbx-rekey identity failed (2): bad hostname');
        },
        reloadSshd: async () => void calls.push('reload'),
        close: async () => undefined,
      }),
      tryLogin: async (key, hostKey) => (key === base.clientPrivateKey ? 'auth-refused' : hostKey === base.hostPublicKey ? 'host-key-mismatch' : 'accepted'),
    });
    const plan = {
      snapshotBase: { clientPrivateKey: base.clientPrivateKey, hostPublicKey: base.hostPublicKey },
      session,
      paths: { authorizedKeys: '/sandbox/config/authorized_keys', hostKey: '/sandbox/config/k', hostKeyPub: '/sandbox/config/k.pub' },
      identity: { hostname: 'sbx-abcdef1234', machineId: newMachineId() },
    };
    const phases: RotationPhase[] = [];
    await rotateKeysAfterRestore(makeTransport(false), { ...plan, onPhase: (p) => phases.push(p) });
    assert.deepEqual(phases, ['connect-template', 'write-keys', 'set-identity', 'reload-sshd', 'connect-session', 'verify-template-refused', 'ready']);
    assert.equal(calls.indexOf('identity sbx-abcdef1234'), calls.indexOf('reload') - 1);
    calls.length = 0;
    await assert.rejects(rotateKeysAfterRestore(makeTransport(true), plan), (err: Error & { phase?: string }) => err.phase === 'set-identity');
    assert.ok(!calls.includes('reload'), 'sshd is not reloaded: the rotation stopped');
  });
});
