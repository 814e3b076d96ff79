import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { describe, it } from 'node:test';
import { blockedHostNetworks, hostElementKey, hostNetworksFrom, readHostNetworks } from '../../src/network/policy/host-networks.js';
import { renderHostNetworks, renderPolicyTable } from '../../src/network/policy/ruleset.js';

/** What os.networkInterfaces() lists (up and running interfaces only), trimmed to what is read. */
const ADDRESSES = [
  { family: 'IPv4', address: '127.0.0.1', cidr: '127.0.0.1/8' },
  { family: 'IPv4', address: '130.92.7.41', cidr: '130.92.7.41/23' },
  { family: 'IPv6', address: 'fe80::1', cidr: 'fe80::1/64' },
  { family: 'IPv4', address: '45.1.2.3', cidr: '45.1.2.3/32' }, // wg0, point-to-point to 45.1.9.9
  { family: 'IPv4', address: '192.168.1.20', cidr: '192.168.1.20/24' },
  { family: 'IPv4', address: '10.200.0.1', cidr: '10.200.0.1/30' }, // a sandbox's host veth
  { family: 'IPv4', address: '172.31.0.5', cidr: null }, // a netmask Node could not read
];
/** /proc/net/route as the kernel prints it (main table; addresses little-endian), trimmed to its first eight columns. */
const ROUTES = [
  'Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT',
  'eth0\t00000000\t01065C82\t0003\t0\t0\t0\t00000000\t0\t0\t0', // default via 130.92.6.1
  'eth0\t00065C82\t00000000\t0001\t0\t0\t0\t00FEFFFF\t0\t0\t0', // 130.92.6.0/23, the kernel's
  'eth0\t006433C6\tFE065C82\t0003\t0\t0\t0\t00FFFFFF\t0\t0\t0', // 198.51.100.0/24 via a router: the way out
  'eth0\t007100CB\t00000000\t0001\t0\t0\t0\tF0FFFFFF\t0\t0\t0', // 203.0.113.0/28 on-link, added by hand
  'eth0\t097100CB\t00000000\t0005\t0\t0\t0\tFFFFFFFF\t0\t0\t0', // 203.0.113.9, a host route inside it
  'wg0\t0909012D\t00000000\t0005\t0\t0\t0\tFFFFFFFF\t0\t0\t0', // the point-to-point peer 45.1.9.9
  '*\t00004664\t00000000\t0201\t0\t0\t0\t0000FFFF\t0\t0\t0', // 100.70.0.0/16 unreachable (RTF_REJECT)
  'eth0\t00080808\t01065C82\t0003\t0\t0\t0\t00FFFFFF\t0\t0\t0', // 8.8.8.0/24, multipath: its first hop's gateway
  'eth9\tnot-hex\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0',
  '',
].join('\n');

describe("unit: the host's own networks in the guest network policy", () => {
  it('reads addresses and on-link routes (a point-to-point peer); not gateways, the default, unreachable routes, IPv6', () => {
    const found = hostNetworksFrom(ADDRESSES, ROUTES);
    for (const cidr of [
      '130.92.7.41/32',
      '130.92.6.0/23',
      '45.1.2.3/32',
      '45.1.9.9/32',
      '203.0.113.0/28',
      '203.0.113.9/32',
      '192.168.1.0/24',
      '10.200.0.0/30',
      '172.31.0.5/32',
    ]) {
      assert.ok(found.includes(cidr), `${cidr} in ${found.join(' ')}`);
    }
    for (const cidr of ['198.51.100.0/24', '100.70.0.0/16', '8.8.8.0/24', '0.0.0.0/0']) assert.ok(!found.includes(cidr), cidr);
  });

  it("on this host: the same networks as iproute2 reads (its on-link routes and its running interfaces' addresses)", async () => {
    const ip = async (...args: string[]) => JSON.parse((await promisify(execFile)('ip', ['-j', '-4', ...args])).stdout) as Array<Record<string, unknown>>;
    const routes = (await ip('route', 'show', 'table', 'main')).filter((r) => r.dst !== 'default' && !r.gateway && !r.nexthops && !r.type);
    const links = (await ip('addr', 'show')).filter((l) => ['UP', 'UNKNOWN'].includes(String(l.operstate)));
    const expected = [
      ...routes.map((r) => (String(r.dst).includes('/') ? String(r.dst) : `${String(r.dst)}/32`)),
      ...links.flatMap((l) => (l.addr_info as Array<{ local: string }>).map((a) => `${a.local}/32`)),
    ];
    const found = await readHostNetworks();
    assert.ok(expected.length > 0);
    for (const cidr of expected) assert.ok(found.includes(cidr), `${cidr} (iproute2) in ${found.join(' ')}`);
  });

  it('keeps only what the fixed ranges and the sandbox subnet miss, without overlaps, whatever the range', () => {
    const blocked = blockedHostNetworks(hostNetworksFrom(ADDRESSES, ROUTES), '10.200.0.0/16');
    assert.deepEqual(blocked, ['45.1.2.3/32', '45.1.9.9/32', '130.92.6.0/23', '203.0.113.0/28']);
    // A host on private networks only: nothing to add. A sandbox subnet outside 10/8 counts.
    assert.deepEqual(blockedHostNetworks(['192.168.1.0/24', '10.1.2.3/32', '172.20.0.0/16', '127.0.0.1/32'], '10.200.0.0/16'), []);
    assert.deepEqual(blockedHostNetworks(['198.18.4.1/32', '100.64.1.0/30'], '198.18.4.0/24'), []);
    // Never "every address" (only a default route looks like it), garbage ignored.
    assert.deepEqual(blockedHostNetworks(['0.0.0.0/0', '300.1.1.1/32', 'x', '1.2.3.4/33'], '10.200.0.0/16'), []);
    assert.deepEqual(blockedHostNetworks(['5.6.7.8/24', '5.6.7.0/25', '5.6.7.200/32'], '10.200.0.0/16'), ['5.6.7.0/24']);
  });

  it('renders a set the forward chain drops on, and a refresh as one transaction; nft lists elements as the drift check expects', () => {
    const text = renderPolicyTable({
      table: 'tzz-netpolicy',
      interfacePrefix: 'tzz-',
      sandboxSubnet: '10.241.0.0/16',
      hostNetworks: ['45.1.2.3/32', '130.92.6.0/23'],
    });
    assert.match(text, /set host4 \{ type ipv4_addr; flags interval; elements = \{ 45\.1\.2\.3\/32, 130\.92\.6\.0\/23 \}; \}/);
    const forward = text.slice(text.indexOf('chain forward'));
    assert.ok(
      forward.indexOf('ip daddr @host4 counter drop') > 0 && forward.indexOf('ip daddr @host4') < forward.indexOf('@egress accept'),
      'dropped before the egress accept',
    );
    assert.equal(
      renderHostNetworks('tzz-netpolicy', ['45.1.2.3/32']),
      'flush set inet tzz-netpolicy host4\nadd element inet tzz-netpolicy host4 { 45.1.2.3/32 }\n',
    );
    assert.equal(renderHostNetworks('tzz-netpolicy', []), 'flush set inet tzz-netpolicy host4\n');
    assert.throws(() => renderHostNetworks('tzz-netpolicy', ['1.2.3.4/32 } ; flush ruleset']), /host network/);
    assert.equal(hostElementKey('45.1.2.3/32'), '"45.1.2.3"');
    assert.equal(hostElementKey('130.92.6.0/23'), '{"prefix":{"addr":"130.92.6.0","len":23}}');
  });
});
