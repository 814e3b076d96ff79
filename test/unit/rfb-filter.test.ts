/**
 * The live view's RFB filter (src/views/rfb-filter.ts) on bytes cut every way a WebSocket may
 * cut them: what goes on is the same however the chunks fall, a view token's input never goes
 * on, and a message that comes a byte a frame costs its length once (the red team: a
 * clipboard of 256 KiB sent one byte a WebSocket frame, by any holder of a view token).
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { ClientFilter, MAX_CLIENT_CUT_TEXT_BYTES, RfbViolation, ServerFilter } from '../../src/views/rfb-filter.js';

const HANDSHAKE = Buffer.concat([Buffer.from('RFB 003.008\n', 'latin1'), Buffer.from([1]), Buffer.from([0])]);

function cutText(length: number): Buffer {
  const message = Buffer.alloc(8 + length, 0x61);
  message.writeUInt8(6, 0);
  message.writeUInt32BE(length, 4);
  return message;
}

const pointer = Buffer.from([5, 0, 0, 10, 0, 20]);
const updateRequest = Buffer.from([3, 1, 0, 0, 0, 0, 4, 0, 3, 0]);
const encodings = Buffer.concat([Buffer.from([2, 0, 0, 2]), Buffer.from([0, 0, 0, 16, 0, 0, 0, 0])]);

/** Pushes `bytes` in chunks of the sizes `cut` gives, and what went on, joined. */
function through(filter: ClientFilter | ServerFilter, bytes: Buffer, cut: (i: number) => number): Buffer {
  const out: Buffer[] = [];
  for (let at = 0, i = 0; at < bytes.length; i++) {
    const size = Math.max(1, cut(i));
    out.push(...filter.push(bytes.subarray(at, at + size)));
    at += size;
  }
  return Buffer.concat(out);
}

describe('the live view RFB filter', () => {
  const stream = Buffer.concat([HANDSHAKE, encodings, updateRequest, pointer, cutText(300), updateRequest]);
  // What goes on: the init byte is always "shared" (1).
  const forwarded = (control: boolean) =>
    Buffer.concat([HANDSHAKE.subarray(0, 13), Buffer.from([1]), encodings, updateRequest, ...(control ? [pointer, cutText(300)] : []), updateRequest]);

  it('forwards the same bytes however the chunks fall; a view token drops input', () => {
    let seed = 7;
    const random = () => (seed = (seed * 1103515245 + 12345) % 2 ** 31) % 40;
    for (const [name, cut] of [
      ['whole', () => stream.length],
      ['a byte at a time', () => 1],
      ['random cuts', random],
    ] as const) {
      assert.deepEqual(through(new ClientFilter('control'), stream, cut), forwarded(true), `control, ${name}`);
      const view = new ClientFilter('view');
      assert.deepEqual(through(view, stream, cut), forwarded(false), `view, ${name}`);
      assert.equal(view.dropped, 2, `view, ${name}: the pointer and the clipboard dropped`);
    }
  });

  it('a 256 KiB clipboard a byte a frame costs its length once, not its length times its frames', () => {
    const message = cutText(MAX_CLIENT_CUT_TEXT_BYTES);
    for (const mode of ['view', 'control'] as const) {
      const filter = new ClientFilter(mode);
      filter.push(HANDSHAKE);
      const began = process.cpuUsage();
      let out = 0;
      for (let i = 0; i < message.length; i++) for (const part of filter.push(message.subarray(i, i + 1))) out += part.length;
      const used = process.cpuUsage(began);
      const ms = (used.user + used.system) / 1000;
      console.log(`a ${message.length}-byte ClientCutText a byte a push (${mode}): ${ms.toFixed(0)} ms of CPU`);
      // Copied again at every byte, this was 3.7 s of the event loop (34 GB copied).
      assert.ok(ms < 1_000, `${ms.toFixed(0)} ms of CPU for one message`);
      assert.equal(out, mode === 'control' ? message.length : 0);
    }
  });

  it('refuses a clipboard over its cap, an unknown message and a foreign version, from their headers', () => {
    const refused = (bytes: Buffer) => assert.throws(() => through(new ClientFilter('control'), bytes, () => 1), RfbViolation);
    refused(Buffer.concat([HANDSHAKE, cutText(0).fill(0, 4).subarray(0, 4), Buffer.from([0, 0x10, 0, 1])]));
    refused(Buffer.concat([HANDSHAKE, Buffer.from([251, 0, 0, 0])]));
    refused(Buffer.from('RFB 003.003\n', 'latin1'));
  });

  it("the guest's handshake, a byte at a time; a name over its cap refused from its length", () => {
    const init = Buffer.alloc(24);
    init.writeUInt16BE(1024, 0);
    init.writeUInt16BE(768, 2);
    init.writeUInt32BE(4, 20);
    const guest = Buffer.concat([
      Buffer.from('RFB 003.008\n', 'latin1'),
      Buffer.from([2, 2, 1]),
      Buffer.alloc(4),
      init,
      Buffer.from('sbx!'),
      Buffer.from('frames'),
    ]);
    const out = through(new ServerFilter(), guest, () => 1);
    const expected = Buffer.concat([Buffer.from('RFB 003.008\n', 'latin1'), Buffer.from([1, 1]), Buffer.alloc(4), init, Buffer.from('sbx!frames')]);
    assert.deepEqual(out, expected);
    const long = Buffer.from(init);
    long.writeUInt32BE(1 << 20, 20);
    assert.throws(
      () => through(new ServerFilter(), Buffer.concat([Buffer.from('RFB 003.008\n', 'latin1'), Buffer.from([1, 1]), Buffer.alloc(4), long]), () => 3),
      RfbViolation,
    );
  });
});
