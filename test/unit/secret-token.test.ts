import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { newSecretToken, parseSecretToken, secretMatches } from '../../src/util/secret-token.js';

describe('secret tokens (link and port tokens)', () => {
  it('gives a token of its kind whose secret matches only the kept digest', () => {
    const made = newSecretToken('prt');
    assert.match(made.token, /^prt_[A-Za-z0-9_-]{12}_[A-Za-z0-9_-]{43}$/);
    const parsed = parseSecretToken('prt', made.token);
    assert.ok(parsed);
    assert.equal(parsed.id, made.id);
    assert.equal(secretMatches(made.digest, parsed.secret), true);
    const other = newSecretToken('prt');
    assert.equal(secretMatches(other.digest, parsed.secret), false, "another token's digest");
    const flipped = parsed.secret.slice(0, -1) + (parsed.secret.endsWith('A') ? 'B' : 'A');
    assert.equal(secretMatches(made.digest, flipped), false, 'one character changed');
  });

  it('reads no token of another kind, and nothing of another shape', () => {
    const link = newSecretToken('lnk');
    assert.equal(parseSecretToken('prt', link.token), undefined, 'a link token is no port token');
    assert.equal(parseSecretToken('lnk', link.token)?.id, link.id);
    for (const bad of ['', 'prt_', `${link.token}x`, link.token.slice(1), `sbx_${link.token.slice(4)}`, `prt_${'a'.repeat(12)}_${'b'.repeat(42)}`]) {
      assert.equal(parseSecretToken('prt', bad), undefined, bad);
    }
  });
});
