import assert from 'node:assert/strict';
import { execFileSync, spawnSync } from 'node:child_process';
import { keyFingerprint } from '../../src/transport/ssh-keys.js';

/** What a guest says of itself, as the fork tests compare them: no two sessions share any of it. */
export interface GuestIdentity {
  clientKey: string;
  hostKey: string;
  address: string;
  hostname: string;
  machineId: string;
  mac: string;
}

/** Its client key, the host key its sshd presents, its address, hostname, machine id and MAC. */
export async function guestIdentity(bash: (id: string, command: string) => Promise<string>, id: string): Promise<GuestIdentity> {
  const clientKey = (await bash(id, 'cat /sandbox/config/authorized_keys')).trim();
  const address = (await bash(id, "ip -4 -o addr show dev eth0 | awk '{print $4}'")).trim();
  const [hostname = '', machineId = '', mac = ''] = (
    await bash(id, "hostname; cat /etc/machine-id; ip -o link show dev eth0 | grep -o 'link/ether [0-9a-f:]*' | cut -d' ' -f2")
  )
    .trim()
    .split('\n');
  // The host key its sshd presents on the wire, asked from the host (the guest user cannot read the file).
  const scanned = execFileSync('ssh-keyscan', ['-T', '20', '-t', 'ed25519', address.split('/')[0] ?? ''], {
    encoding: 'utf8',
    stdio: ['ignore', 'pipe', 'ignore'],
  });
  const line = scanned.split('\n').find((l) => l.includes('ssh-ed25519')) ?? '';
  return { clientKey, hostKey: keyFingerprint(line.split(' ').slice(1).join(' ')), address, hostname, machineId, mac };
}

/** An SSH login from the host with a key file (OpenSSH's client): accepted, or refused with the key. */
export function sshLogin(user: string, keyFile: string, address: string): string {
  const options = ['BatchMode=yes', 'StrictHostKeyChecking=no', 'UserKnownHostsFile=/dev/null', 'ConnectTimeout=30', 'IdentitiesOnly=yes'];
  const res = spawnSync('ssh', [...options.flatMap((o) => ['-o', o]), '-i', keyFile, `${user}@${address}`, 'true'], { encoding: 'utf8', timeout: 60_000 });
  if (res.status === 0) return 'accepted';
  return /Permission denied/.test(res.stderr) ? 'refused' : `ssh: ${res.status} ${res.stderr.trim()}`;
}

/** No two of the sessions share a key, host key, address, machine id or MAC; each is named sbx-<id> and has a machine id of machine-id(5)'s form. */
export function assertOwnIdentities(seen: GuestIdentity[], ids: string[]): void {
  for (const field of ['clientKey', 'hostKey', 'address', 'machineId', 'mac'] as const) {
    assert.equal(new Set(seen.map((s) => s[field])).size, ids.length, `${field}: ${JSON.stringify(seen.map((s) => s[field]))}`);
  }
  assert.deepEqual(
    seen.map((s) => s.hostname),
    ids.map((id) => `sbx-${id}`),
  );
  for (const s of seen) assert.match(s.machineId, /^[0-9a-f]{32}$/);
}
