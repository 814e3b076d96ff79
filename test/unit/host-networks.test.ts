import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { blockedHostNetworks, hostElementKey, hostNetworksFrom } from '../../src/network/policy/host-networks.js';
import { renderHostNetworks, renderPolicyTable } from '../../src/network/policy/ruleset.js';

/** What `ip -j -4 addr` and `ip -j -4 route show table main` print, trimmed to what is read. */
const ADDRESSES = [
  { ifname: 'lo', addr_info: [{ family: 'inet', local: '127.0.0.1', prefixlen: 8 }] },
  {
    ifname: 'eth0',
    addr_info: [
      { family: 'inet', local: '130.92.7.41', prefixlen: 23 },
      { family: 'inet6', local: 'fe80::1', prefixlen: 64 },
    ],
  },
  { ifname: 'wg0', addr_info: [{ family: 'inet', local: '45.1.2.3', address: '45.1.9.9', prefixlen: 32 }] },
  { ifname: 'eth1', addr_info: [{ family: 'inet', local: '192.168.1.20', prefixlen: 24 }] },
  { ifname: 'sbx-abcdefghij', addr_info: [{ family: 'inet', local: '10.200.0.1', prefixlen: 30 }] },
];
const ROUTES = [
  { dst: 'default', gateway: '130.92.6.1', dev: 'eth0' },
  { dst: '130.92.6.0/23', dev: 'eth0', protocol: 'kernel', scope: 'link', prefsrc: '130.92.7.41' },
  { dst: '198.51.100.0/24', gateway: '130.92.6.254', dev: 'eth0' }, // through a router: the way out
  { dst: '203.0.113.0/28', dev: 'eth0', scope: 'link' }, // on-link, added by hand
  { dst: '203.0.113.9', dev: 'eth0', scope: 'link' }, // a host route, inside the one above
  { dst: '100.70.0.0/16', type: 'blackhole' },
  { dst: '8.8.8.0/24', nexthops: [{ gateway: '130.92.6.1' }] },
];

describe("unit: the host's own networks in the guest network policy", () => {
  it('reads addresses (with a point-to-point peer) and on-link routes; not gateways, the default, blackholes, IPv6', () => {
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
    ]) {
      assert.ok(found.includes(cidr), `${cidr} in ${found.join(' ')}`);
    }
    for (const cidr of ['198.51.100.0/24', '100.70.0.0/16', '8.8.8.0/24', '0.0.0.0/0']) assert.ok(!found.includes(cidr), cidr);
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
