import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { renderAddEgress, renderDeleteTable, renderPolicyTable, renderRemoveEgress } from '../src/network/policy/ruleset.js';
import { run } from '../src/util/exec.js';

/** The generated nftables text, without touching the host's rules (`nft -c` only checks). */
describe('network policy ruleset text', () => {
  const table = 'tzz-netpolicy';

  it('is a valid nftables transaction (checked by nft itself, not applied)', async () => {
    const script = renderPolicyTable({ table, interfacePrefix: 'tzz-', sandboxSubnet: '10.241.0.0/16' }) + renderAddEgress(table, { hostInterface: 'tzz-abcdefghij', guestAddress: '10.241.0.2' });
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
    assert.deepEqual(remove.map((l) => l.split(' ')[0]), ['add', 'delete']);
    assert.match(renderDeleteTable(table), /^table inet tzz-netpolicy \{\}\ndelete table inet tzz-netpolicy\n$/);
  });

  it('lets only the shapes it generates reach nft', () => {
    assert.throws(() => renderAddEgress(table, { hostInterface: 'x" } ; flush ruleset', guestAddress: '10.0.0.2' }), /interface name/);
    assert.throws(() => renderAddEgress(table, { hostInterface: 'tzz-a', guestAddress: '10.0.0.2 }' }), /IPv4 address/);
    assert.throws(() => renderPolicyTable({ table: 'bad table', interfacePrefix: 'tzz-', sandboxSubnet: '10.0.0.0/8' }), /table name/);
    assert.throws(() => renderPolicyTable({ table, interfacePrefix: 'tzz-', sandboxSubnet: '10.0.0.0/8; flush ruleset' }), /subnet/);
    assert.throws(() => renderPolicyTable({ table, interfacePrefix: '*', sandboxSubnet: '10.0.0.0/8' }), /resource prefix/);
  });
});
