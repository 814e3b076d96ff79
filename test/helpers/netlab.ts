import { spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { createServer, type Server } from 'node:net';
import { readHostNetworks } from '../../src/network/policy/host-networks.js';
import { run } from '../../src/util/exec.js';

/**
 * A stand-in for "the internet" and for extra host addresses, made by the test alone, so
 * that no test packet can leave the host:
 * - a network namespace joined to the host by a veth, addressed from TEST-NET-3 (203.0.113.0/24, documentation only, never routed
 *   anywhere real): the host's end is .4k+1, the namespace's .4k+2 (a neighbour on the host's
 *   own LAN, in a range that is not private: egress must not reach it);
 * - behind it, as a router would be, "the internet": another TEST-NET-3 address, routed to the
 *   namespace from the host and on none of the host's own networks (TEST-NET-1 can be the
 *   host's real LAN, as on the test VMs: 192.0.2.0/24), and a private address (172.31.x.1,
 *   routed too), to show that even with egress a sandbox cannot reach private ranges;
 * - a listener in that namespace answering every connection with the peer address it saw
 *   (so a test can tell the sandbox was masqueraded);
 * - an extra host address from TEST-NET-2 (198.51.100.0/24) on the uplink's host end:
 *   "another of the host's own addresses", where the test makes the orchestrator listen
 *   (on the uplink, as this host's kernel has no dummy interfaces).
 * Names are the test prefix's letters after "np" (`np<abc>-lab`, `np<abc>-up`), for a human
 * cleaning up; not the prefix itself, which the policy fences as a sandbox's interface.
 */
export interface NetLab {
  netns: string;
  /** The host's end of the veth to the namespace. */
  uplink: string;
  /** The host's end of the uplink: the source a masqueraded sandbox shows. */
  uplinkHostAddress: string;
  /** A non-private address in the namespace, reached through a route (not on-link): "the internet". */
  publicAddress: string;
  /** The namespace's end of the uplink: an address on the host's own connected subnet, not private. */
  lanAddress: string;
  /** A private (172.16/12) address in the namespace, routed from the host. */
  privateAddress: string;
  /** An extra address of the host's own (on the uplink's host end). */
  hostExtraAddress: string;
  /** The listener's port in the namespace (on every address there). */
  port: number;
  close(): Promise<void>;
}

const LISTENER = `
const net = require('node:net');
const server = net.createServer((socket) => {
  socket.on('error', () => {}); // a client that hangs up at once must not end the listener
  socket.end('peer=' + socket.remoteAddress + '\\n');
});
server.listen(Number(process.argv[1]), '0.0.0.0', () => process.stdout.write('ready\\n'));
`;

function randomByte(min: number, max: number): number {
  return min + Math.floor(Math.random() * (max - min + 1));
}

function toNumber(address: string): number {
  return address.split('.').reduce((acc, octet) => acc * 256 + Number(octet), 0);
}

/** Whether `address` is in any of `networks` (CIDRs). */
function onNetworks(address: string, networks: readonly string[]): boolean {
  const value = toNumber(address);
  return networks.some((cidr) => {
    const [base = '', len = '32'] = cidr.split('/');
    const size = 2 ** (32 - Number(len));
    return value - (value % size) === toNumber(base);
  });
}

/**
 * The base (last octet) of a random /30 in `prefix24` (e.g. "203.0.113") none of whose
 * addresses is on one of the host's networks or routes now (another test's lab, the host's
 * own LAN), nor in `avoid`.
 */
export async function unusedBlock(prefix24: string, avoid: readonly string[] = []): Promise<number> {
  // Routes through a gateway too: another lab's "internet" is one.
  const routes = JSON.parse((await run(['ip', '-j', '-4', 'route', 'show', 'table', 'main'])).stdout || '[]') as Array<{ dst?: string }>;
  const routed = routes
    .map((r) => r.dst ?? '')
    .filter((dst) => /^[\d.]+(\/\d+)?$/.test(dst))
    .map((dst) => (dst.includes('/') ? dst : `${dst}/32`));
  const networks = [...(await readHostNetworks()), ...routed, ...avoid.map((a) => (a.includes('/') ? a : `${a}/32`))];
  for (let attempt = 0; attempt < 200; attempt++) {
    const block = randomByte(0, 63) * 4;
    if ([0, 1, 2, 3].every((i) => !onNetworks(`${prefix24}.${block + i}`, networks))) return block;
  }
  throw new Error(`no free /30 in ${prefix24}.0/24`);
}

export async function createNetLab(prefix: string): Promise<NetLab> {
  const tag = `np${prefix.slice(0, -1)}`;
  const netns = `${tag}-lab`;
  const uplink = `${tag}-up`;
  const block = await unusedBlock('203.0.113');
  const uplinkHostAddress = `203.0.113.${block + 1}`;
  const lanAddress = `203.0.113.${block + 2}`;
  const publicAddress = `203.0.113.${(await unusedBlock('203.0.113', [`203.0.113.${block}/30`])) + 2}`;
  const privateAddress = `172.31.${randomByte(0, 255)}.1`;
  const hostExtraAddress = `198.51.100.${randomByte(1, 254)}`;
  const port = randomByte(20_000, 29_999);
  let listener: ChildProcess | undefined;

  const close = async (): Promise<void> => {
    listener?.kill('SIGKILL');
    await run(['ip', 'netns', 'delete', netns], { allowFailure: true });
    await run(['ip', 'link', 'delete', uplink], { allowFailure: true });
  };
  try {
    await run(['ip', 'netns', 'add', netns]);
    await run(['ip', 'link', 'add', uplink, 'type', 'veth', 'peer', 'name', 'eth0', 'netns', netns]);
    await run(['ip', '-batch', '-'], {
      input:
        [
          `addr add ${uplinkHostAddress}/30 dev ${uplink}`,
          `link set ${uplink} up`,
          `route add ${privateAddress}/32 via ${lanAddress} dev ${uplink}`,
          `route add ${publicAddress}/32 via ${lanAddress} dev ${uplink}`,
          `addr add ${hostExtraAddress}/32 dev ${uplink}`,
        ].join('\n') + '\n',
    });
    await run(['ip', '-n', netns, '-batch', '-'], {
      input:
        [
          'link set lo up',
          `addr add ${privateAddress}/32 dev lo`,
          `addr add ${publicAddress}/32 dev lo`,
          `addr add ${lanAddress}/30 dev eth0`,
          'link set eth0 up',
          // From "the internet" by default: a UDP reply from an unbound socket carries it (also
          // to the host's end of the link, where a masqueraded sandbox's datagrams come from).
          `route replace 203.0.113.${block}/30 dev eth0 src ${publicAddress}`,
          `route add default via ${uplinkHostAddress} src ${publicAddress}`,
        ].join('\n') + '\n',
    });
    listener = spawn('ip', ['netns', 'exec', netns, process.execPath, '-e', LISTENER, String(port)], { stdio: ['ignore', 'pipe', 'inherit'] });
    const [chunk] = (await Promise.race([once(listener.stdout!, 'data'), once(listener, 'exit').then(() => ['exited'])])) as [Buffer | string];
    if (!String(chunk).includes('ready')) throw new Error(`the lab listener did not start: ${String(chunk)}`);
  } catch (err) {
    await close();
    throw err;
  }
  return { netns, uplink, uplinkHostAddress, publicAddress, lanAddress, privateAddress, hostExtraAddress, port, close };
}

/** A TCP listener of the test's own on one host address (e.g. a sandbox's gateway). */
export async function listenOn(address: string): Promise<{ port: number; server: Server }> {
  const server = createServer((socket) => {
    socket.on('error', () => undefined); // a probe that hangs up at once is no failure
    socket.end('host\n');
  });
  server.listen(0, address);
  await once(server, 'listening');
  const addressInfo = server.address();
  if (addressInfo === null || typeof addressInfo === 'string') throw new Error('no port');
  return { port: addressInfo.port, server };
}

/**
 * A bash script for the guest that tries a TCP connection to each target at once (bash's
 * /dev/tcp: no extra package in the image), with a short timeout, and prints one line per
 * target: "<addr>:<port> open <what the peer said>" or "<addr>:<port> closed". Targets are
 * addresses and ports the test made, checked here before they reach the script.
 */
export function probeScript(targets: ReadonlyArray<{ address: string; port: number }>, timeoutSeconds = 3): string {
  const lines = targets.map(({ address, port }) => {
    if (!/^[\d.]+$/.test(address) || !Number.isInteger(port)) throw new Error(`bad probe target ${address}:${port}`);
    return `probe ${address} ${port} &`;
  });
  return [
    'probe() {',
    // Connected is "open" whether or not the peer speaks first (sshd does, HTTP does not).
    `  if out=$(timeout ${timeoutSeconds} bash -c 'exec 3<>"/dev/tcp/$0/$1" || exit 1; timeout 1 head -n1 <&3; exit 0' "$1" "$2" 2>/dev/null); then echo "$1:$2 open $out"; else echo "$1:$2 closed"; fi`,
    '}',
    ...lines,
    'wait',
  ].join('\n');
}

/** Parses probeScript's output: target -> the peer's first line, or null when closed. */
export function parseProbes(text: string): Map<string, string | null> {
  const result = new Map<string, string | null>();
  for (const line of text.trim().split('\n')) {
    const match = /^(\S+) (open|closed) ?(.*)$/.exec(line);
    if (match) result.set(match[1] as string, match[2] === 'open' ? (match[3] as string) : null);
  }
  return result;
}
