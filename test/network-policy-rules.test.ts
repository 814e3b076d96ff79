import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import {
  renderAddEgress,
  renderAddSource,
  renderDeleteTable,
  renderHostNetworks,
  renderPolicyTable,
  renderRemoveEgress,
  renderRemoveSource,
} from '../src/network/policy/ruleset.js';
import { run } from '../src/util/exec.js';

/** The generated nftables text, without touching the host's rules (`nft -c` only checks). */
describe('network policy ruleset text', () => {
  const table = 'tzz-netpolicy';

  it('is a valid nftables transaction (checked by nft itself, not applied)', async () => {
    const script =
      renderPolicyTable({ table, interfacePrefix: 'tzz-', sandboxSubnet: '10.241.0.0/16' }) +
      renderAddEgress(table, { hostInterface: 'tzz-abcdefghij', guestAddress: '10.241.0.2' });
    const res = await run(['nft', '-c', '-f', '-'], { input: script, allowFailure: true });
    assert.equal(res.exitCode, 0, res.stderr);
  });

  it('never blocks TEST-NET ranges, always the sandbox subnet (even outside the private ranges)', () => {
    const text = renderPolicyTable({ table, interfacePrefix: 'tzz-', sandboxSubnet: '198.18.4.0/24' });
    assert.match(text, /198\.18\.4\.0\/24 \}/);
    assert.doesNotMatch(text, /203\.0\.113|198\.51\.100|192\.0\.2\./);
  });

  it('fences by interface prefix (fails closed), allows by entry; removal is add-then-delete (idempotent)', () => {
    const text = renderPolicyTable({ table, interfacePrefix: 'tzz-', sandboxSubnet: '10.241.0.0/16' });
    assert.match(text, /iifname != "tzz-\*" return/);
    assert.match(text, /oifname "tzz-\*" counter drop/);
    const remove = renderRemoveEgress(table, { hostInterface: 'tzz-abcdefghij', guestAddress: '10.241.0.2' }).trim().split('\n');
    assert.deepEqual(
      remove.map((l) => l.split(' ')[0]),
      ['add', 'delete'],
    );
    assert.match(renderDeleteTable(table), /^table inet tzz-netpolicy \{\}\ndelete table inet tzz-netpolicy\n$/);
  });

  it('drops forged sources before any accept, in both hooks; a table put back carries its sessions', async () => {
    const entry = { hostInterface: 'tzz-abcdefghij', guestAddress: '10.241.0.2' };
    const text = renderPolicyTable({
      table,
      interfacePrefix: 'tzz-',
      sandboxSubnet: '10.241.0.0/16',
      hostOnlySources: ['169.254.200.2'],
      entries: { sources: [entry, { ...entry, hostInterface: 'tzz-klmnopqrst', guestAddress: '10.241.0.6' }], egress: [entry] },
    });
    const chainBody = (chain: string) => {
      const start = text.indexOf(`chain ${chain} {`);
      return text.slice(start, text.indexOf('\n  }', start));
    };
    for (const chain of ['input', 'forward']) {
      const body = chainBody(chain);
      const spoof = body.indexOf('!= @sources');
      assert.ok(spoof > 0, `${chain}: no anti-spoofing rule`);
      assert.ok(spoof < body.search(/ accept\n/), `${chain}: anti-spoofing must come before the first accept`);
    }
    // The template address is let through to the host only, never forwarded.
    assert.match(chainBody('input'), /ip saddr != \{ 169\.254\.200\.2 \}/);
    assert.doesNotMatch(chainBody('forward'), /169\.254/);
    assert.match(text, /set sources \{ type ifname \. ipv4_addr; elements = \{ "tzz-abcdefghij" \. 10\.241\.0\.2, "tzz-klmnopqrst" \. 10\.241\.0\.6 \}; \}/);
    assert.match(text, /set egress \{ type ifname \. ipv4_addr; elements = \{ "tzz-abcdefghij" \. 10\.241\.0\.2 \}; \}/);
    const res = await run(['nft', '-c', '-f', '-'], { input: text + renderAddSource(table, entry) + renderRemoveSource(table, entry), allowFailure: true });
    assert.equal(res.exitCode, 0, res.stderr);
    assert.throws(
      () => renderPolicyTable({ table, interfacePrefix: 'tzz-', sandboxSubnet: '10.0.0.0/8', hostOnlySources: ['1.2.3.4 } accept'] }),
      /IPv4 address/,
    );
  });

  it("with the host's own networks in it, and their refresh, is still a valid transaction", async () => {
    const hostNetworks = ['45.1.2.3/32', '130.92.6.0/23', '203.0.113.0/28'];
    const script =
      renderPolicyTable({ table, interfacePrefix: 'tzz-', sandboxSubnet: '10.241.0.0/16', hostNetworks }) +
      renderHostNetworks(table, hostNetworks.slice(1)) +
      renderHostNetworks(table, []);
    const res = await run(['nft', '-c', '-f', '-'], { input: script, allowFailure: true });
    assert.equal(res.exitCode, 0, res.stderr);
  });

  it('lets only the shapes it generates reach nft', () => {
    assert.throws(() => renderAddEgress(table, { hostInterface: 'x" } ; flush ruleset', guestAddress: '10.0.0.2' }), /interface name/);
    assert.throws(() => renderAddEgress(table, { hostInterface: 'tzz-a', guestAddress: '10.0.0.2 }' }), /IPv4 address/);
    assert.throws(() => renderPolicyTable({ table: 'bad table', interfacePrefix: 'tzz-', sandboxSubnet: '10.0.0.0/8' }), /table name/);
    assert.throws(() => renderPolicyTable({ table, interfacePrefix: 'tzz-', sandboxSubnet: '10.0.0.0/8; flush ruleset' }), /subnet/);
    assert.throws(() => renderPolicyTable({ table, interfacePrefix: '*', sandboxSubnet: '10.0.0.0/8' }), /resource prefix/);
  });
});
