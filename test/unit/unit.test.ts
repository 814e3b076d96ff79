import assert from 'node:assert/strict';
import { readFile } from 'node:fs/promises';
import { describe, it } from 'node:test';
import { parseAction } from '../../src/computer/actions.js';
import { Scaler } from '../../src/computer/scaling.js';
import { InvalidRequestError } from '../../src/errors.js';
import { renderSettings } from '../../src/guest/contract.js';
import { AddressPool } from '../../src/network/address-pool.js';
import { ResourceNames } from '../../src/network/names.js';
import { newSessionId } from '../../src/sessions/session.js';
import { commandLine, shellQuote } from '../../src/transport/quote.js';
import { CleanupStack } from '../../src/util/cleanup-stack.js';
import { run } from '../../src/util/exec.js';

describe('shell quoting', () => {
  const hostile = [
    'plain',
    "it's",
    '$(touch /tmp/pwned)',
    '`id`',
    '; rm -rf / #',
    '"double" \\back\\slash',
    'new\nline',
    '-leading-dash',
    '--',
    '',
    '   spaces   ',
    'ünïcödé 漢字 🎉',
    "'''",
    '*',
  ];
  it('round-trips every string through a real /bin/sh unchanged', async () => {
    for (const text of hostile) {
      const { stdout } = await run(['sh', '-c', `printf %s ${shellQuote(text)}`]);
      assert.equal(stdout, text, `round trip of ${JSON.stringify(text)}`);
    }
  });
  it('keeps an argument vector apart', async () => {
    const { stdout } = await run(['sh', '-c', `printf '%s|' ${commandLine(['a b', '$HOME', "x'y"])}`]);
    assert.equal(stdout, "a b|$HOME|x'y|");
  });
  it('refuses NUL', () => {
    assert.throws(() => shellQuote('a\0b'), /NUL/);
  });
});

describe('address pool', () => {
  it('leases /30 blocks, lowest first, and reuses released ones', () => {
    const pool = new AddressPool('10.241.0.0/16');
    assert.equal(pool.size, 16384);
    const a = pool.lease();
    const b = pool.lease();
    assert.deepEqual([a.gateway, a.guest], ['10.241.0.1', '10.241.0.2']);
    assert.deepEqual([b.gateway, b.guest], ['10.241.0.5', '10.241.0.6']);
    pool.release(a.index);
    assert.equal(pool.lease().index, 0);
    assert.equal(pool.describe(16383).guest, '10.241.255.254');
  });
  it('says when it is exhausted', () => {
    const pool = new AddressPool('10.0.0.0/29');
    pool.lease();
    pool.lease();
    assert.throws(() => pool.lease(), /no free addresses/);
  });
  it('rejects malformed ranges', () => {
    assert.throws(() => new AddressPool('10.0.0.1/16'), /aligned/);
    assert.throws(() => new AddressPool('banana'), /subnet must look like/);
    assert.throws(() => new AddressPool('10.0.0.0/31'), /prefix/);
  });
});

describe('cleanup stack', () => {
  it('releases last-in-first-out, once, and joins errors', async () => {
    const order: string[] = [];
    const stack = new CleanupStack();
    await stack.push('a', () => void order.push('a'));
    await stack.push('b', () => {
      order.push('b');
      throw new Error('boom');
    });
    await stack.push('c', async () => void order.push('c'));
    await assert.rejects(stack.run(), /release b: boom/);
    await assert.rejects(stack.run(), /release b: boom/); // same outcome, not run again
    assert.deepEqual(order, ['c', 'b', 'a']);
    await stack.push('late', () => void order.push('late'));
    assert.deepEqual(order, ['c', 'b', 'a', 'late']);
  });
  it('replace releases the earlier of a name at once and keeps one entry in its place', async () => {
    const order: string[] = [];
    const stack = new CleanupStack();
    await stack.push('network', () => void order.push('network'));
    await stack.replace('connection', () => void order.push('connection 0'));
    await stack.push('vm', () => void order.push('vm'));
    for (let i = 1; i <= 1000; i++) await stack.replace('connection', () => void order.push(`connection ${i}`));
    assert.deepEqual(order.slice(0, 3), ['connection 0', 'connection 1', 'connection 2']);
    assert.equal(order.length, 1000, 'each earlier one released when replaced');
    assert.deepEqual(stack.pending(), ['network', 'connection', 'vm']);
    order.length = 0;
    await stack.run();
    assert.deepEqual(order, ['vm', 'connection 1000', 'network']);
  });
});

describe('names', () => {
  it('session ids fit interface names and are recognised', () => {
    for (let i = 0; i < 100; i++) {
      const id = newSessionId();
      assert.match(id, /^[a-z0-9]{10}$/);
      assert.ok(`sbx-${id}`.length <= 15);
      assert.equal(new ResourceNames().sessionIdOf(`sbx-${id}`), id);
    }
    assert.equal(new ResourceNames().sessionIdOf('sbx-short'), undefined);
    assert.equal(new ResourceNames('tab-').sessionIdOf(`sbx-${newSessionId()}`), undefined);
    assert.throws(() => new ResourceNames('toolong-'), /three lowercase letters/);
    assert.equal(new ResourceNames().sessionIdOf('eth0'), undefined);
  });
  it('guest settings refuse anything a shell could interpret', () => {
    const settings = {
      SANDBOX_ID: 'abc',
      SANDBOX_HOSTNAME: 'h',
      SANDBOX_DISPLAY: 99,
      SANDBOX_WIDTH: 1,
      SANDBOX_HEIGHT: 1,
      SANDBOX_DEPTH: 24,
      SANDBOX_NET_CONFIGURE: 0 as const,
      SANDBOX_ADDRESS: '10.0.0.2/30',
      SANDBOX_GATEWAY: '10.0.0.1',
      SANDBOX_TRANSPORT: 'tcp' as const,
    };
    assert.match(renderSettings(settings), /SANDBOX_ADDRESS=10.0.0.2\/30\n/);
    assert.throws(() => renderSettings({ ...settings, SANDBOX_HOSTNAME: 'x$(id)' }), /unsafe/);
  });
});

describe('computer-use input validation', () => {
  const screen = new Scaler({ width: 1024, height: 768 }, { width: 1024, height: 768 });
  const bad: Array<[unknown, RegExp]> = [
    [{}, /action is required/],
    [[], /JSON object/],
    [{ action: 'fly' }, /action "fly" is unknown/],
    [{ action: 'mouse_move' }, /coordinate is required for mouse_move/],
    [{ action: 'mouse_move', coordinate: [1, 2], text: 'x' }, /text is not accepted for mouse_move/],
    [{ action: 'left_click', coordinate: [-1, 2] }, /coordinate x must be a non-negative integer/],
    [{ action: 'left_click', coordinate: [1.5, 2] }, /coordinate x must be a non-negative integer/],
    [{ action: 'left_click', coordinate: [1, '2'] }, /coordinate y must be a non-negative integer/],
    [{ action: 'left_click', coordinate: [1] }, /array of two integers/],
    [{ action: 'left_click', coordinate: [1024, 0] }, /outside the screen/],
    [{ action: 'left_click', coordinate: [0, 768] }, /outside the screen/],
    [{ action: 'type' }, /text is required for type/],
    [{ action: 'type', text: '' }, /non-empty/],
    [{ action: 'type', text: 'a\0b' }, /NUL/],
    [{ action: 'type', text: 'x'.repeat(20_001) }, /at most 20000/],
    [{ action: 'key', text: 'ctrl+s; touch /tmp/pwned' }, /invalid key name/],
    [{ action: 'key', text: '--help' }, /invalid key name/],
    [{ action: 'key', text: 42 }, /non-empty string/],
    [{ action: 'left_click', key: '$(id)' }, /key has an invalid key name/],
    [{ action: 'screenshot', coordinate: [1, 1] }, /coordinate is not accepted for screenshot/],
  ];
  for (const [input, message] of bad) {
    it(`rejects ${JSON.stringify(input).slice(0, 70)}`, () => {
      assert.throws(
        () => parseAction(input, screen),
        (err: unknown) => err instanceof InvalidRequestError && message.test(err.message),
      );
    });
  }
  it('accepts the contract inputs', () => {
    assert.deepEqual(parseAction({ action: 'left_click', coordinate: [1023, 767] }, screen), {
      action: 'left_click',
      coordinate: { x: 1023, y: 767 },
    });
    assert.deepEqual(parseAction({ action: 'key', text: 'ctrl+shift+t' }, screen), { action: 'key', combos: [['Control_L', 'Shift_L', 't']] });
    assert.deepEqual(parseAction({ action: 'type', text: '$(id) ;`x`' }, screen), { action: 'type', text: '$(id) ;`x`' });
  });
});

describe('keymap binder for non-ASCII typing', () => {
  it('binds only what the keyboard lacks, reuses bindings, and chunks beyond capacity', async () => {
    const { KeymapBinder, keysymFor, spareKeycodes } = await import('../../src/computer/keymap.js');
    assert.deepEqual(spareKeycodes('keycode   8 =\nkeycode  93 = \nkeycode  94 = less greater\nkeycode  97 =\nkeycode 103 =\n'), [93, 97, 103]);
    assert.equal(keysymFor(0xf6), 0xf6);
    assert.equal(keysymFor(0x6f22), 0x01006f22);
    const binder = new KeymapBinder([93, 97, 103]); // two usable, one left for xdotool
    assert.equal(binder.capacity, 2);
    assert.deepEqual(binder.plan('plain ASCII\t'), [{ chunk: 'plain ASCII\t', bindings: '' }]);
    assert.deepEqual(binder.plan('wörld'), [{ chunk: 'wörld', bindings: 'keycode 93 = 0xf6 0xf6\n' }]);
    assert.deepEqual(binder.plan('ö again'), [{ chunk: 'ö again', bindings: '' }]);
    const plans = binder.plan('aé漢🎉b');
    assert.deepEqual(
      plans.map((p) => p.chunk),
      ['aé漢', '🎉b'],
    );
    assert.equal(plans.map((p) => p.chunk).join(''), 'aé漢🎉b');
    assert.match(plans[0]?.bindings ?? '', /0xe9/);
    assert.match(plans[1]?.bindings ?? '', /0x101f389/);
  });
});

describe('session keys', () => {
  it('are always well-formed ed25519 pairs (ssh2 alone makes a bad one about 1 in 230)', async () => {
    const { generateSessionKeys, publicKeyBlob } = await import('../../src/transport/ssh-keys.js');
    const ssh2 = (await import('ssh2')).default;
    for (let i = 0; i < 1500; i++) {
      const keys = generateSessionKeys('abcdefghij');
      assert.equal(publicKeyBlob(keys.clientPublicKey).length, 51);
      assert.equal(publicKeyBlob(keys.hostPublicKey).length, 51);
      assert.ok(!(ssh2.utils.parseKey(keys.clientPrivateKey) instanceof Error));
      assert.ok(!(ssh2.utils.parseKey(keys.hostPrivateKey) instanceof Error));
    }
  });
});

describe('host commands', () => {
  it('a killGroup timeout ends what the command left running in its group (as runc leaves its criu), not only the command', async () => {
    const started = performance.now();
    const res = await run(['bash', '-c', 'sleep 5 & echo $!; wait'], { timeoutMs: 300, killGroup: true, allowFailure: true });
    const tookMs = performance.now() - started;
    const orphan = Number(res.stdout.trim());
    assert.ok(orphan > 0, `the command said its child's pid: ${res.stdout}`);
    // Without the group kill, the orphan holds the output pipe open for its 5 s, and lives on.
    assert.ok(tookMs < 3_000, `answered at the timeout, not when the orphan ends: ${tookMs.toFixed(0)} ms`);
    // Killed, it is gone, or a zombie until its new parent reaps it.
    const state = (await readFile(`/proc/${orphan}/stat`, 'utf8').catch(() => '')).replace(/^.*\) /s, '').charAt(0);
    assert.ok(state === '' || state === 'Z', `the child it left is gone (state ${state})`);
  });
});
