import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import { readFile, writeFile } from 'node:fs/promises';
import { after, before, describe, it } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { listTable } from '../src/network/policy/nft.js';
import { run } from '../src/util/exec.js';
import { guestAddress } from './helpers/guest.js';
import { createNetLab, type NetLab } from './helpers/netlab.js';
import { TEST_PREFIX, startTestOrchestrator, type TestOrchestrator } from './helpers/orchestrator.js';

/**
 * Red team, network: someone on the host removes or changes the policy table (it must come
 * back, and no sandbox may start meanwhile), and a sandbox forges its source address (the
 * forged packets must not leave it). All traffic goes to a namespace this test makes
 * (helpers/netlab.ts), never off the host.
 */
const IP_FORWARD = '/proc/sys/net/ipv4/ip_forward';
const CHECK_MS = 500;
/** The UDP port both the honest and the forged datagrams come from (the same conntrack flow). */
const SOURCE_PORT = 40_123;

/** A UDP listener in the lab namespace: prints "<payload> <peer>" per datagram and answers it. */
const UDP_LISTENER = `
const socket = require('node:dgram').createSocket('udp4');
socket.on('message', (data, peer) => {
  process.stdout.write(data.toString() + ' ' + peer.address + '\\n');
  socket.send('ack', peer.port, peer.address);
});
socket.bind(Number(process.argv[1]), '0.0.0.0', () => process.stdout.write('ready\\n'));
`;

/** Sends one datagram from (source, SOURCE_PORT) and prints the answer, or "no answer" after 2 s. */
const UDP_SEND = `
const [source, sourcePort, target, targetPort, payload] = process.argv.slice(1);
const socket = require('node:dgram').createSocket({ type: 'udp4', reuseAddr: true });
const timer = setTimeout(() => { console.log('no answer'); socket.close(); }, 2000);
socket.on('message', (data) => { clearTimeout(timer); console.log(data.toString()); socket.close(); });
socket.bind(Number(sourcePort), source, () => socket.send(payload, Number(targetPort), target));
`;

describe('red team: the network policy stays in force, and a sandbox cannot forge its source', () => {
  let lab: NetLab;
  let orch: TestOrchestrator;
  let honest: string; // a session with egress: its flow is what the forger tries to ride
  let forger: string; // a session without egress
  let forwardingBefore = '';
  let listener: ChildProcess;
  let udpPort: number;
  const received: string[] = [];

  const create = (payload: Record<string, unknown>) => orch.server.inject({ method: 'POST', url: '/v1/sessions', payload, headers: orch.authHeaders });
  const table = () => orch.names.policyTable;
  const repairs = async (): Promise<number> => {
    const text = await orch.metrics.registry.metrics();
    return Number(/^sandbox_network_policy_repairs_total (\d+)/m.exec(text)?.[1] ?? 'NaN');
  };

  /** A datagram from a sandbox's netns with the given source address (root in the netns may add any). */
  async function sendFrom(sessionId: string, source: string, payload: string): Promise<string> {
    const res = await run([
      'ip',
      'netns',
      'exec',
      orch.names.netns(sessionId),
      process.execPath,
      '-e',
      UDP_SEND,
      source,
      String(SOURCE_PORT),
      lab.publicAddress,
      String(udpPort),
      payload,
    ]);
    return res.stdout.trim();
  }

  /** Waits until the listener has printed a line starting with `payload`. */
  async function seen(payload: string, withinMs = 3_000): Promise<string | undefined> {
    const end = Date.now() + withinMs;
    while (Date.now() < end) {
      const line = received.find((l) => l.startsWith(`${payload} `));
      if (line) return line;
      await sleep(20);
    }
    return undefined;
  }

  before(async () => {
    forwardingBefore = (await readFile(IP_FORWARD, 'utf8')).trim();
    lab = await createNetLab(TEST_PREFIX);
    udpPort = 30_000 + Math.floor(Math.random() * 5_000);
    listener = spawn('ip', ['netns', 'exec', lab.netns, process.execPath, '-e', UDP_LISTENER, String(udpPort)], { stdio: ['ignore', 'pipe', 'inherit'] });
    let buffered = '';
    listener.stdout?.on('data', (chunk: Buffer) => {
      buffered += chunk.toString();
      const lines = buffered.split('\n');
      buffered = lines.pop() ?? '';
      received.push(...lines);
    });
    for (const end = Date.now() + 10_000; !received.includes('ready'); await sleep(20)) {
      if (Date.now() > end) throw new Error('the UDP listener did not start');
    }
    orch = await startTestOrchestrator({ networkPolicyCheckMs: CHECK_MS });
    const [a, b] = await Promise.all([create({ network: { egress: true } }), create({})]);
    assert.equal(a.statusCode, 201, a.body);
    assert.equal(b.statusCode, 201, b.body);
    honest = a.json().id;
    forger = b.json().id;
  });

  after(async () => {
    listener?.kill('SIGKILL');
    await orch?.stop();
    await lab?.close();
    if (forwardingBefore === '0') await writeFile(IP_FORWARD, '0\n');
  });

  it('a forged source does not leave the sandbox: not on a flow of another sandbox, not at all (positive control seen)', async () => {
    const honestAddress = await guestAddress(orch.names, honest);
    const forgerAddress = await guestAddress(orch.names, forger);
    // The honest sandbox's flow, answered: conntrack now holds it as established.
    assert.equal(await sendFrom(honest, honestAddress, 'honest-1'), 'ack');
    assert.ok(await seen('honest-1'), `the listener saw: ${JSON.stringify(received)}`);
    // The forger takes the honest sandbox's address as a second one on its eth0 (root in its
    // own netns, as a VM guest kernel would be) and sends on the same 5-tuple: without
    // anti-spoofing this rides the honest flow's "established" state and is masqueraded out.
    await run(['ip', '-n', orch.names.netns(forger), 'addr', 'add', `${honestAddress}/32`, 'dev', 'eth0']);
    assert.equal(await sendFrom(forger, honestAddress, 'forged-established'), 'no answer');
    // Another address of nobody's, and the host's own uplink address: dropped too.
    await run(['ip', '-n', orch.names.netns(forger), 'addr', 'add', '10.254.254.254/32', 'dev', 'eth0']);
    assert.equal(await sendFrom(forger, '10.254.254.254', 'forged-nobody'), 'no answer');
    // The control: the honest sandbox again, sent after the forgeries on the same path.
    assert.equal(await sendFrom(honest, honestAddress, 'honest-2'), 'ack');
    assert.ok(await seen('honest-2'));
    assert.deepEqual(
      received.filter((l) => l.startsWith('forged')),
      [],
      'no forged datagram reached the listener',
    );
    // The forger's own address, without egress, does not leave either (the policy as before).
    assert.equal(await sendFrom(forger, forgerAddress, 'forger-own'), 'no answer');
    const counters = await run(['nft', 'list', 'chain', 'inet', table(), 'forward']);
    assert.match(counters.stdout, /counter packets [1-9]\d* bytes \d+ drop comment "source address not the sandbox's own"/);
  });

  it('a deleted table is found by the periodic check and put back with every session; creates are refused until it is', async () => {
    const before = await repairs();
    let entered!: () => void;
    const repairing = new Promise<void>((resolve) => (entered = resolve));
    let release!: () => void;
    const held = new Promise<void>((resolve) => (release = resolve));
    orch.manager.policyGuard.beforeRepair = () => {
      entered();
      return held;
    };
    try {
      await run(['nft', 'delete', 'table', 'inet', table()]);
      // The timer, not a create, finds it (within the interval, with room for a busy host).
      const found = await Promise.race([repairing.then(() => true), sleep(CHECK_MS * 10).then(() => false)]);
      assert.ok(found, 'the periodic check did not notice the missing table');
      assert.equal(orch.manager.policyGuard.healthy, false);
      const refused = await create({});
      assert.equal(refused.statusCode, 503, refused.body);
      assert.equal(refused.json().error.code, 'network_policy_unavailable');
      assert.ok(Number(refused.headers['retry-after']) > 0, 'Retry-After');
      assert.equal(orch.manager.list().length, 2, 'the refused create took nothing');
      assert.equal(await listTable('inet', table()), undefined, 'still missing while the repair is held');
    } finally {
      orch.manager.policyGuard.beforeRepair = undefined;
      release();
    }
    const end = Date.now() + CHECK_MS * 10;
    while (!orch.manager.policyGuard.healthy && Date.now() < end) await sleep(20);
    assert.equal(orch.manager.policyGuard.healthy, true);
    assert.equal(await repairs(), before + 1);
    // Back whole: both sessions' own sources, and the egress entry of the one that had it.
    assert.deepEqual((await orch.manager.policy.sourceInterfaces()).sort(), [orch.names.hostVeth(honest), orch.names.hostVeth(forger)].sort());
    assert.deepEqual(await orch.manager.policy.egressInterfaces(), [orch.names.hostVeth(honest)]);
    // And in force: the honest sandbox gets out, a forged source still does not.
    const honestAddress = await guestAddress(orch.names, honest);
    assert.equal(await sendFrom(honest, honestAddress, 'honest-after-repair'), 'ack');
    assert.equal(await sendFrom(forger, honestAddress, 'forged-after-repair'), 'no answer');
    assert.ok(await seen('honest-after-repair'));
    assert.deepEqual(
      received.filter((l) => l.startsWith('forged')),
      [],
    );
  });

  it('a create right after the table is deleted is refused at once (no window until the next tick)', async () => {
    const before = await repairs();
    // The timer is stopped, so that it cannot find (and repair) the table first: this is
    // the create's own check.
    orch.manager.policyGuard.stop();
    try {
      await run(['nft', 'delete', 'table', 'inet', table()]);
      const refused = await create({});
      assert.equal(refused.statusCode, 503, refused.body);
      assert.equal(refused.json().error.code, 'network_policy_unavailable');
      assert.match(refused.json().error.message, /missing/);
      assert.equal(orch.manager.list().length, 2, 'the refused create took nothing');
      await orch.manager.policyGuard.check(); // the repair the refusal started
      assert.equal(await repairs(), before + 1, 'the create found it, and it was put back');
      assert.ok(await listTable('inet', table()));
    } finally {
      orch.manager.policyGuard.start();
    }
  });

  it('changed rules and a removed entry are put back too', async (t) => {
    const before = await repairs();
    // An operator "opening up" the forward chain...
    const flushed = Date.now();
    await run(['nft', 'flush', 'chain', 'inet', table(), 'forward']);
    let end = Date.now() + CHECK_MS * 10;
    while ((await repairs()) === before && Date.now() < end) await sleep(10);
    assert.equal(await repairs(), before + 1);
    t.diagnostic(`flushed forward chain put back after ${Date.now() - flushed} ms (check interval ${CHECK_MS} ms)`);
    const forward = await run(['nft', 'list', 'chain', 'inet', table(), 'forward']);
    assert.match(forward.stdout, /source address not the sandbox's own/);
    // ... and the egress entry of a session deleted by hand: back as well.
    const honestAddress = await guestAddress(orch.names, honest);
    await run(['nft', 'delete', 'element', 'inet', table(), 'egress', `{ "${orch.names.hostVeth(honest)}" . ${honestAddress} }`]);
    end = Date.now() + CHECK_MS * 10;
    while ((await repairs()) === before + 1 && Date.now() < end) await sleep(50);
    assert.equal(await repairs(), before + 2);
    assert.deepEqual(await orch.manager.policy.egressInterfaces(), [orch.names.hostVeth(honest)]);
  });

  it("a check costs a few milliseconds (one nft listing, and the host's networks read with ip)", async (t) => {
    const rounds = 20;
    const started = performance.now();
    for (let i = 0; i < rounds; i++) assert.equal(await orch.manager.policy.drift(), undefined);
    t.diagnostic(`one check: ${((performance.now() - started) / rounds).toFixed(1)} ms on average over ${rounds}`);
    const refreshed = performance.now();
    for (let i = 0; i < rounds; i++) await orch.manager.policy.refreshHostNetworks();
    t.diagnostic(
      `reading the host's networks (interfaces and /proc/net/route): ${((performance.now() - refreshed) / rounds).toFixed(1)} ms on average over ${rounds}`,
    );
  });

  it('a session created and destroyed after the repairs does not count as drift', async () => {
    const before = await repairs();
    const res = await create({ network: { egress: true } });
    assert.equal(res.statusCode, 201, res.body);
    const id = res.json().id as string;
    assert.ok((await orch.manager.policy.sourceInterfaces()).includes(orch.names.hostVeth(id)));
    assert.equal((await orch.server.inject({ method: 'DELETE', url: `/v1/sessions/${id}`, headers: orch.authHeaders })).statusCode, 200);
    assert.ok(!(await orch.manager.policy.sourceInterfaces()).includes(orch.names.hostVeth(id)));
    await sleep(CHECK_MS * 3);
    assert.equal(await repairs(), before);
    assert.equal(orch.manager.policyGuard.healthy, true);
  });
});
