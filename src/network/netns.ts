import { run } from '../util/exec.js';
import type { CleanupStack } from '../util/cleanup-stack.js';
import type { AddressLease } from './address-pool.js';
import type { ResourceNames } from './names.js';

/** A sandbox's own network namespace, linked to the host by a veth pair. */
export interface SandboxNetwork {
  netns: string;
  /** Path a runtime joins: /var/run/netns/<name> */
  netnsPath: string;
  hostInterface: string;
  lease: AddressLease;
}

const IP = 'ip';

/**
 * Creates the sandbox's netns and a veth pair whose guest end is `eth0` inside it, with the
 * guest's address and a default route via the host end. The releases are pushed as each
 * piece is made, so a failure half-way leaves nothing behind.
 */
export async function createSandboxNetwork(
  names: ResourceNames,
  sessionId: string,
  lease: AddressLease,
  cleanup: CleanupStack,
): Promise<SandboxNetwork> {
  const netns = names.netns(sessionId);
  const host = names.hostVeth(sessionId);
  await run([IP, 'netns', 'add', netns]);
  await cleanup.push(`netns ${netns}`, () => deleteNetns(netns));
  await run([IP, 'link', 'add', host, 'type', 'veth', 'peer', 'name', 'eth0', 'netns', netns]);
  await cleanup.push(`veth ${host}`, () => deleteLink(host));
  // `ip -batch` runs many steps in one process, reading them from stdin (no shell): one
  // batch for the host's end, one inside the namespace.
  await run([IP, '-batch', '-'], {
    input: [`addr add ${lease.gateway}/${lease.prefixLength} dev ${host}`, `link set ${host} up`].join('\n') + '\n',
  });
  await run([IP, '-n', netns, '-batch', '-'], {
    input:
      [
        'link set lo up',
        `addr add ${lease.guest}/${lease.prefixLength} dev eth0`,
        'link set eth0 up',
        `route add default via ${lease.gateway}`,
      ].join('\n') + '\n',
  });
  return { netns, netnsPath: `/var/run/netns/${netns}`, hostInterface: host, lease };
}

export async function deleteNetns(netns: string): Promise<void> {
  const res = await run([IP, 'netns', 'delete', netns], { allowFailure: true });
  if (res.exitCode !== 0 && !/No such file|not found|does not exist/i.test(res.stderr)) {
    throw new Error(`ip netns delete ${netns}: ${res.stderr.trim()}`);
  }
}

export async function deleteLink(name: string): Promise<void> {
  const res = await run([IP, 'link', 'delete', name], { allowFailure: true });
  if (res.exitCode !== 0 && !/Cannot find device|does not exist/i.test(res.stderr)) {
    throw new Error(`ip link delete ${name}: ${res.stderr.trim()}`);
  }
}

/** Session ids of every netns of ours on the host. */
export async function listSandboxNetns(names: ResourceNames): Promise<string[]> {
  const { stdout } = await run([IP, 'netns', 'list']);
  return stdout
    .split('\n')
    .map((line) => line.split(' ')[0] ?? '')
    .map((name) => names.sessionIdOf(name))
    .filter((id): id is string => id !== undefined);
}

/** Session ids of every host-side veth of ours. */
export async function listSandboxLinks(names: ResourceNames): Promise<string[]> {
  const { stdout } = await run([IP, '-o', 'link', 'show']);
  const ids: string[] = [];
  for (const line of stdout.split('\n')) {
    // "12: sbx-abc@if2: <BROADCAST,...>": the name ends at '@' or ':'
    const name = /^\d+:\s+([^:@\s]+)/.exec(line)?.[1];
    const id = name && names.sessionIdOf(name);
    if (id) ids.push(id);
  }
  return ids;
}

/** The guest address of a live sandbox, read back from its host veth (.1 there, .2 the guest). */
export async function guestAddressOf(names: ResourceNames, sessionId: string): Promise<string> {
  const { stdout } = await run([IP, '-o', '-4', 'addr', 'show', 'dev', names.hostVeth(sessionId)]);
  const match = /inet (\d+\.\d+\.\d+)\.(\d+)\//.exec(stdout);
  if (!match) throw new Error(`no address on ${names.hostVeth(sessionId)}`);
  return `${match[1]}.${Number(match[2]) + 1}`;
}
