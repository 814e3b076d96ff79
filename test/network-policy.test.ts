import assert from 'node:assert/strict';
import { readFile, writeFile } from 'node:fs/promises';
import type { AddressInfo, Server } from 'node:net';
import { after, before, describe, it } from 'node:test';
import { listTables } from '../src/network/policy/nft.js';
import { NetworkPolicy } from '../src/network/policy/network-policy.js';
import { ResourceNames } from '../src/network/names.js';
import { run } from '../src/util/exec.js';
import type { GuestTransport } from '../src/transport/index.js';
import { connectToGuest, guestAddress, guestSh } from './helpers/guest.js';
import { createNetLab, listenOn, parseProbes, probeScript, unusedBlock, type NetLab } from './helpers/netlab.js';
import { TEST_PREFIX, TEST_SUBNET, startTestOrchestrator, type TestOrchestrator } from './helpers/orchestrator.js';
import { pino } from 'pino';

/**
 * The guest network policy, tested from inside real sandboxes against addresses this test
 * makes (see helpers/netlab.ts): no packet of this test is ever meant for an address outside
 * this host. A probe that must fail is a connection that does not succeed within 3 s.
 */
const NAMES = new ResourceNames(TEST_PREFIX);
const IP_FORWARD = '/proc/sys/net/ipv4/ip_forward';
/** How often the first suite's orchestrator checks its policy (and reads the host's networks). */
const POLICY_CHECK_MS = 500;
const policyOf = () => new NetworkPolicy(NAMES, TEST_SUBNET, pino({ level: 'silent' }));
const ourTables = async () => (await listTables()).filter((t) => t.name.startsWith(TEST_PREFIX));

let forwardingBefore = '';
before(async () => {
  forwardingBefore = (await readFile(IP_FORWARD, 'utf8')).trim();
});
after(async () => {
  // The orchestrator never turns forwarding back off (others may rely on it); the test
  // leaves the host as it found it.
  if (forwardingBefore === '0') await writeFile(IP_FORWARD, '0\n');
});

async function gatewayOf(orch: TestOrchestrator, id: string): Promise<string> {
  return (await guestAddress(orch.names, id)).replace(/\.(\d+)$/, (_, last: string) => `.${Number(last) - 1}`);
}

describe('the guest network policy, from inside sandboxes (container runtime)', () => {
  let lab: NetLab;
  let orch: TestOrchestrator;
  let orchPort: number;
  let closed: string; // a session without egress
  let open: string; // a session with egress
  const guests: GuestTransport[] = [];
  const listeners: Server[] = [];
  const addr = {} as Record<'closed' | 'open' | 'closedGateway' | 'openGateway', string>;
  const gatewayPort = {} as Record<'closed' | 'open', number>;

  before(async () => {
    lab = await createNetLab(TEST_PREFIX);
    // The orchestrator listens on one of the host's own addresses (not loopback, which a
    // guest could never reach anyway): what a server bound to 0.0.0.0 would expose.
    orch = await startTestOrchestrator({ host: lab.hostExtraAddress, port: 0, networkPolicyCheckMs: POLICY_CHECK_MS }, true);
    orchPort = (orch.server.server.address() as AddressInfo).port;
    const [a, b] = await Promise.all([
      orch.server.inject({ method: 'POST', url: '/v1/sessions', payload: {}, headers: orch.authHeaders }),
      orch.server.inject({ method: 'POST', url: '/v1/sessions', payload: { network: { egress: true } }, headers: orch.authHeaders }),
    ]);
    assert.equal(a.statusCode, 201, a.body);
    assert.equal(b.statusCode, 201, b.body);
    closed = a.json().id;
    open = b.json().id;
    addr.closed = await guestAddress(orch.names, closed);
    addr.open = await guestAddress(orch.names, open);
    addr.closedGateway = await gatewayOf(orch, closed);
    addr.openGateway = await gatewayOf(orch, open);
    // A listener on each sandbox's own gateway (the host end of its veth).
    for (const which of ['closed', 'open'] as const) {
      const { port, server } = await listenOn(which === 'closed' ? addr.closedGateway : addr.openGateway);
      gatewayPort[which] = port;
      listeners.push(server);
    }
  });
  after(async () => {
    for (const g of guests) g.close();
    for (const l of listeners) l.close();
    await orch?.stop();
    await lab?.close();
  });

  async function probeFrom(id: string, targets: Array<{ address: string; port: number }>): Promise<Map<string, string | null>> {
    const guest = await connectToGuest(orch.stateDir, id, await guestAddress(orch.names, id));
    guests.push(guest);
    const res = await guestSh(guest, probeScript(targets));
    assert.equal(res.exitCode, 0, res.stderr.toString());
    return parseProbes(res.text);
  }

  it('shows the choice in the session view; egress is off by default', async () => {
    assert.deepEqual((await orch.server.inject({ method: 'GET', url: `/v1/sessions/${closed}`, headers: orch.authHeaders })).json().network, {
      egress: false,
      transport: 'tcp',
      interfaces: ['lo', 'eth0'],
    });
    assert.deepEqual((await orch.server.inject({ method: 'GET', url: `/v1/sessions/${open}`, headers: orch.authHeaders })).json().network, {
      egress: true,
      transport: 'tcp',
      interfaces: ['lo', 'eth0'],
    });
    // Only the egress session has an entry: the other is fenced by the prefix rules alone.
    assert.deepEqual(await policyOf().egressInterfaces(), [NAMES.hostVeth(open)]);
    assert.equal((await readFile(IP_FORWARD, 'utf8')).trim(), '1', 'egress turned forwarding on');
  });

  it('every target is there: the host reaches each of them (so a failed probe means the policy)', async () => {
    assert.equal((await fetch(`http://${lab.hostExtraAddress}:${orchPort}/healthz`)).status, 200);
    for (const [address, port] of [
      [addr.closedGateway, gatewayPort.closed],
      [addr.openGateway, gatewayPort.open],
      [lab.publicAddress, lab.port],
      [lab.lanAddress, lab.port],
      [lab.privateAddress, lab.port],
    ] as const) {
      const res = await run(['timeout', '3', 'bash', '-c', 'exec 3<>"/dev/tcp/$0/$1"', address, String(port)], { allowFailure: true });
      assert.equal(res.exitCode, 0, `host -> ${address}:${port}`);
    }
  });

  it('without egress: the host (veth end, another address), the orchestrator port, another sandbox, the internet, private ranges: all unreachable', async () => {
    const targets = [
      { address: addr.closedGateway, port: gatewayPort.closed },
      { address: addr.closedGateway, port: 22 },
      { address: lab.hostExtraAddress, port: orchPort },
      { address: lab.uplinkHostAddress, port: orchPort },
      { address: addr.open, port: 22 },
      { address: lab.publicAddress, port: lab.port },
      { address: lab.lanAddress, port: lab.port },
      { address: lab.privateAddress, port: lab.port },
    ];
    // This session has no entry of its own in the policy: the prefix rules fence it.
    const seen = await probeFrom(closed, targets);
    for (const t of targets)
      assert.equal(seen.get(`${t.address}:${t.port}`), null, `${t.address}:${t.port} must be unreachable; got ${JSON.stringify([...seen])}`);
  });

  it('with egress: an address in a test namespace is reachable through NAT; the host, its LAN (a public range), the orchestrator, another sandbox and private ranges still are not', async () => {
    const blocked = [
      // A neighbour on the host's own connected subnet, which is not a private range.
      { address: lab.lanAddress, port: lab.port },
      { address: addr.openGateway, port: gatewayPort.open },
      { address: addr.closedGateway, port: gatewayPort.closed },
      { address: lab.hostExtraAddress, port: orchPort },
      { address: lab.uplinkHostAddress, port: orchPort },
      { address: addr.closed, port: 22 },
      { address: lab.privateAddress, port: lab.port },
    ];
    const reachable = { address: lab.publicAddress, port: lab.port };
    const seen = await probeFrom(open, [...blocked, reachable]);
    // The listener saw the host's uplink address, not the guest's: masqueraded.
    assert.equal(seen.get(`${reachable.address}:${reachable.port}`), `peer=${lab.uplinkHostAddress}`, JSON.stringify([...seen]));
    for (const t of blocked)
      assert.equal(seen.get(`${t.address}:${t.port}`), null, `${t.address}:${t.port} must be unreachable; got ${JSON.stringify([...seen])}`);
  });

  it('a network the host gains later is fenced at the next policy check, and reachable again once it goes', async () => {
    // Another neighbour behind the lab, reached through a route as the internet is; then the
    // host takes an address on its subnet (a /30 of TEST-NET-2 on the uplink, on none of the
    // host's networks yet), which makes it the host's own connected network. Every address
    // here is in the test's namespace.
    const block = await unusedBlock('198.51.100');
    const neighbour = `198.51.100.${block + 2}`;
    const hostSide = `198.51.100.${block + 1}/30`;
    const network = `198.51.100.${block}/30`;
    const target = { address: neighbour, port: lab.port };
    const key = `${neighbour}:${lab.port}`;
    const inSet = async () => (await run(['nft', 'list', 'set', 'inet', NAMES.policyTable, 'host4'])).stdout.includes(network);
    await run(['ip', '-n', lab.netns, 'addr', 'add', `${neighbour}/32`, 'dev', 'lo']);
    await run(['ip', 'route', 'add', `${neighbour}/32`, 'via', lab.lanAddress]);
    let added = false;
    try {
      assert.equal((await probeFrom(open, [target])).get(key), `peer=${lab.uplinkHostAddress}`, "reachable while it is not the host's");
      assert.equal(await inSet(), false);
      await run(['ip', 'addr', 'add', hostSide, 'dev', lab.uplink]);
      added = true;
      const start = performance.now();
      while (!(await inSet())) {
        assert.ok(performance.now() - start < 10 * POLICY_CHECK_MS, `${network} not in the policy ${10 * POLICY_CHECK_MS} ms after the host took it`);
        await new Promise((resolve) => setTimeout(resolve, 50));
      }
      const fencedMs = performance.now() - start;
      assert.equal((await probeFrom(open, [target])).get(key), null, `${key}: on the host's own subnet now`);
      await run(['ip', 'addr', 'del', hostSide, 'dev', lab.uplink]);
      added = false;
      while (await inSet()) {
        assert.ok(performance.now() - start < 20 * POLICY_CHECK_MS, `${network} still in the policy after the host gave it up`);
        await new Promise((resolve) => setTimeout(resolve, 50));
      }
      assert.equal((await probeFrom(open, [target])).get(key), `peer=${lab.uplinkHostAddress}`, 'reachable again');
      console.log(`# host network fenced ${fencedMs.toFixed(0)} ms after it appeared (policy check every ${POLICY_CHECK_MS} ms)`);
    } finally {
      if (added) await run(['ip', 'addr', 'del', hostSide, 'dev', lab.uplink], { allowFailure: true });
      await run(['ip', 'route', 'del', `${neighbour}/32`], { allowFailure: true });
    }
  });

  it('the host still reaches both guests over SSH (its own connections and their replies)', async () => {
    for (const id of [closed, open]) {
      const res = await orch.server.inject({
        method: 'POST',
        url: `/v1/sessions/${id}/actions`,
        payload: { action: 'cursor_position' },
        headers: orch.authHeaders,
      });
      assert.equal(res.statusCode, 200, res.body);
    }
  });

  it('refuses bad network options with a 400 naming the field, and takes nothing', async () => {
    for (const network of [{ egress: 'yes' }, { egress: 1 }, { internet: true }, true, 'egress']) {
      const res = await orch.server.inject({ method: 'POST', url: '/v1/sessions', payload: { network }, headers: orch.authHeaders });
      assert.equal(res.statusCode, 400, `${JSON.stringify(network)}: ${res.body}`);
      assert.match(res.json().error.message, /network/);
    }
    assert.equal((await policyOf().egressInterfaces()).length, 1);
  });

  it('destroy takes a session out of the policy, idempotently; stop removes the table', async () => {
    const policy = policyOf();
    for (const id of [open, closed]) {
      assert.equal((await orch.server.inject({ method: 'DELETE', url: `/v1/sessions/${id}`, headers: orch.authHeaders })).statusCode, 200);
      assert.equal((await orch.server.inject({ method: 'DELETE', url: `/v1/sessions/${id}`, headers: orch.authHeaders })).statusCode, 200);
    }
    assert.deepEqual(await policy.egressInterfaces(), []);
    // A release run twice (a destroy racing the reaper) is harmless.
    await policy.release(open, addr.open);
    assert.deepEqual(await ourTables(), [{ family: 'inet', name: NAMES.policyTable }]);
    await orch.stop();
    assert.deepEqual(await ourTables(), []);
  });
});

describe('the network policy when things go wrong', () => {
  it('a create with egress that fails half-way leaves no policy entry', async () => {
    // 1 ms is too short for SSH to come up (a fast host once booted within 300): a real boot
    // failure after the policy was set, which no deadline is checked before.
    const orch = await startTestOrchestrator({ bootTimeoutMs: 1 });
    try {
      const res = await orch.server.inject({ method: 'POST', url: '/v1/sessions', payload: { network: { egress: true } }, headers: orch.authHeaders });
      assert.equal(res.statusCode, 503, res.body);
      assert.deepEqual(await policyOf().egressInterfaces(), []);
    } finally {
      await orch.stop();
    }
    assert.deepEqual(await ourTables(), []);
  });

  it("the host's networks are part of the checked table: as installed no drift; a removed one is drift; a change is put in by the refresh", async () => {
    let networks = ['45.1.2.3/32', '130.92.6.0/23', '192.168.7.0/24'];
    const policy = new NetworkPolicy(NAMES, TEST_SUBNET, pino({ level: 'silent' }), [], async () => networks);
    await policy.reclaim();
    try {
      const listed = async () => (await run(['nft', 'list', 'set', 'inet', NAMES.policyTable, 'host4'])).stdout;
      assert.match(await listed(), /elements = \{ 45\.1\.2\.3, 130\.92\.6\.0\/23 \}/, 'the private /24 is left to the fixed ranges');
      assert.equal(await policy.drift(), undefined, 'as installed: no drift (the listing reads back as what was put in)');
      await run(['nft', 'delete', 'element', 'inet', NAMES.policyTable, 'host4', '{ 45.1.2.3 }']);
      assert.match((await policy.drift()) ?? '', /set host4: 1 element\(s\) missing/);
      await policy.reinstall();
      assert.equal(await policy.drift(), undefined);
      networks = ['130.92.6.0/23', '203.0.113.200/29'];
      assert.deepEqual(await policy.refreshHostNetworks(), ['130.92.6.0/23', '203.0.113.200/29']);
      assert.match(await listed(), /elements = \{ 130\.92\.6\.0\/23, 203\.0\.113\.200\/29 \}/);
      assert.equal(await policy.drift(), undefined);
    } finally {
      await policy.uninstall();
    }
    assert.deepEqual(await ourTables(), []);
  });

  it('start-up replaces a policy table left behind (with its stale entries) and deletes other tables of our prefix', async () => {
    const policy = policyOf();
    await policy.reclaim(); // as an earlier run would have installed it
    const stale = { address: '10.242.255.2' };
    await run(['nft', '-f', '-'], {
      input:
        [`add element inet ${NAMES.policyTable} egress { "${NAMES.hostVeth('stale00000')}" . ${stale.address} }`, `add table ip ${TEST_PREFIX}oldlayout`].join(
          '\n',
        ) + '\n',
    });
    assert.equal((await ourTables()).length, 2);
    const orch = await startTestOrchestrator();
    try {
      assert.deepEqual(await ourTables(), [{ family: 'inet', name: NAMES.policyTable }]);
      assert.deepEqual(await policy.egressInterfaces(), []);
    } finally {
      await orch.stop();
    }
    assert.deepEqual(await ourTables(), []);
  });
});

describe('the network policy for a VM (qemu runtime: TAP bridged to the veth in the netns)', () => {
  let lab: NetLab;
  let orch: TestOrchestrator;
  let id: string;

  before(async () => {
    lab = await createNetLab(TEST_PREFIX);
    orch = await startTestOrchestrator({ runtime: 'qemu', host: lab.hostExtraAddress, port: 0 }, true);
    const res = await orch.server.inject({ method: 'POST', url: '/v1/sessions', payload: { network: { egress: true } }, headers: orch.authHeaders });
    assert.equal(res.statusCode, 201, res.body);
    id = res.json().id;
  });
  after(async () => {
    await orch?.stop();
    await lab?.close();
  });

  it('a VM with egress reaches the test namespace, but not the host, the orchestrator or a private range', async () => {
    const orchPort = (orch.server.server.address() as AddressInfo).port;
    const gateway = await gatewayOf(orch, id);
    const blocked = [
      { address: gateway, port: orchPort },
      { address: lab.hostExtraAddress, port: orchPort },
      { address: lab.privateAddress, port: lab.port },
    ];
    const guest = await connectToGuest(orch.stateDir, id, await guestAddress(orch.names, id));
    try {
      const seen = parseProbes((await guestSh(guest, probeScript([...blocked, { address: lab.publicAddress, port: lab.port }]))).text);
      assert.equal(seen.get(`${lab.publicAddress}:${lab.port}`), `peer=${lab.uplinkHostAddress}`, JSON.stringify([...seen]));
      for (const t of blocked) assert.equal(seen.get(`${t.address}:${t.port}`), null, `${t.address}:${t.port} must be unreachable`);
    } finally {
      guest.close();
    }
  });
});
