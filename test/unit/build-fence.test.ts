import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { canonicalSubnet, renderBuildFence } from '../../src/templates/build-fence.js';
import { BLOCKED_IPV4_RANGES } from '../../src/network/policy/ranges.js';
import { duration } from '../../src/templates/template-build.js';

/**
 * The template builds' network fence as text (the real tier applies it: redteam-template-build).
 * Before, a sandbox subnet set outside the blocked ranges (SBX_SUBNET=45.76.0.0/16, a public
 * block routed to the guests) was not in it: a package download step reached every guest there.
 */
const UIDS = { first: 3_000_000_000, last: 3_000_524_287 };
/** Public address space: in none of BLOCKED_IPV4_RANGES. */
const PUBLIC_SUBNET = '45.76.0.0/16';

/** The output chain's rules, in order. */
function rules(script: string): string[] {
  const chain = script.slice(script.indexOf('chain output {'));
  return chain
    .split('\n')
    .map((line) => line.trim())
    .filter((line) => line.startsWith('meta skuid'));
}

describe('unit: the template build fence', () => {
  it('drops the configured sandbox subnet, outside the blocked ranges, for the build uids, before DNS is let through', () => {
    assert.ok(!BLOCKED_IPV4_RANGES.some((range) => range.startsWith('45.')), 'the test subnet is not one of the fixed ranges (else this proves nothing)');
    const script = renderBuildFence(UIDS, [PUBLIC_SUBNET]);
    assert.match(script, /set sandboxes4 \{ type ipv4_addr; flags interval; auto-merge; elements = \{ 45\.76\.0\.0\/16 \} \}/);
    const [first, second] = rules(script);
    assert.equal(first, `meta skuid 3000000000-3000524287 ip daddr @sandboxes4 counter drop comment "a template build step to a sandbox subnet"`);
    // Even port 53 of a guest: no resolver of the host's lives in a sandbox subnet.
    assert.match(second ?? '', /th dport 53 accept$/);
    // The rest as before: the host itself, the fixed ranges, IPv6.
    assert.equal(rules(script).length, 5);
    assert.match(script, /fib daddr type local counter drop/);
    assert.ok(script.includes(`ip daddr { ${BLOCKED_IPV4_RANGES.join(', ')} } counter drop`));
    assert.match(script, /ip6 daddr \{ fc00::\/7, fe80::\/10, ff00::\/8 \} counter drop/);
    // Replaced whole in one transaction: never a moment without the table.
    assert.ok(script.startsWith('table inet sbx-template-build {}\ndelete table inet sbx-template-build\ntable inet sbx-template-build {\n'));
  });

  it('several subnets (overlapping: an auto-merge set), canonical; none: an empty set', () => {
    const script = renderBuildFence(UIDS, ['45.76.3.9/16', '10.241.0.0/16', '45.76.0.0/24', '10.241.0.0/16']);
    assert.match(script, /elements = \{ 45\.76\.0\.0\/16, 10\.241\.0\.0\/16, 45\.76\.0\.0\/24 \}/);
    assert.match(renderBuildFence(UIDS, []), /set sandboxes4 \{ type ipv4_addr; flags interval; auto-merge; \}/);
  });

  it('refuses what is not an IPv4 subnet (the value becomes nft text), and a uid range that is none', () => {
    assert.equal(canonicalSubnet('203.0.113.77/30'), '203.0.113.76/30');
    assert.equal(canonicalSubnet('203.0.113.77/32'), '203.0.113.77/32');
    for (const bad of ['45.76.0.0', '45.76.0.0/0', '45.76.0.0/33', '256.1.1.1/8', '45.76.0.0/16 } ; flush ruleset ; {', 'fc00::/7', ''])
      assert.throws(() => renderBuildFence(UIDS, [bad]), /not an IPv4 subnet/, bad);
    assert.throws(() => renderBuildFence({ first: 10, last: 9 }, []), /not a uid range/);
  });

  it('time limits read as a person says them', () => {
    assert.deepEqual([2_000, 1_500, 90_000, 120_000, 30 * 60_000, 60 * 60_000, 150 * 60_000].map(duration), [
      '2 s',
      '1.5 s',
      '90 s',
      '2 min',
      '30 min',
      '60 min',
      '2.5 h',
    ]);
  });
});
