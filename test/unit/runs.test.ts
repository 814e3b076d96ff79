import assert from 'node:assert/strict';
import { Writable } from 'node:stream';
import { describe, it } from 'node:test';
import type { BetaMessageParam } from '@anthropic-ai/sdk/resources/beta/messages/messages';
import { EventStream } from '../../src/api/event-stream.js';
import { DROPPED_IMAGE_TEXT, keepRecentImages, markCacheBreakpoint } from '../../src/runs/image-budget.js';
import { storableTranscript } from '../../src/runs/run-store.js';
import { TOOL_VERSIONS, toolSet } from '../../src/runs/tool-versions.js';

const image = (data: string) => ({ type: 'image' as const, source: { type: 'base64' as const, media_type: 'image/png' as const, data } });
const turn = (id: string, ...content: Array<ReturnType<typeof image> | { type: 'text'; text: string }>): BetaMessageParam => ({
  role: 'user',
  content: [{ type: 'tool_result', tool_use_id: id, content, is_error: false }],
});

function imagesOf(messages: BetaMessageParam[]): string[] {
  return JSON.stringify(messages).match(/"data":"([^"]+)"/g) ?? [];
}

describe("runs: the loop's pure parts", () => {
  it('keeps only the N most recent images, the older ones replaced by a short text', () => {
    const messages: BetaMessageParam[] = [
      { role: 'user', content: [{ type: 'text', text: 'task' }] },
      turn('a', image('one')),
      { role: 'assistant', content: [{ type: 'text', text: 'ok' }] },
      turn('b', { type: 'text', text: 'X=1,Y=2' }, image('two')),
      turn('c', image('three'), image('four')),
    ];
    keepRecentImages(messages, 3);
    assert.deepEqual(imagesOf(messages), ['"data":"two"', '"data":"three"', '"data":"four"']);
    assert.match(JSON.stringify(messages[1]), new RegExp(DROPPED_IMAGE_TEXT.replace(/[[\]]/g, '\\$&')));
    keepRecentImages(messages, 1);
    assert.deepEqual(imagesOf(messages), ['"data":"four"']);
  });

  it('puts one cache breakpoint on the last block of the last user turn, and moves it along', () => {
    const messages: BetaMessageParam[] = [{ role: 'user', content: [{ type: 'text', text: 'task' }] }];
    markCacheBreakpoint(messages);
    assert.deepEqual((messages[0]?.content as Array<{ cache_control?: unknown }>)[0]?.cache_control, { type: 'ephemeral' });
    messages.push({ role: 'assistant', content: [{ type: 'tool_use', id: 't', name: 'bash', input: {} }] }, turn('t', { type: 'text', text: 'out' }));
    markCacheBreakpoint(messages);
    const marked = messages.flatMap((m, i) =>
      Array.isArray(m.content) ? m.content.flatMap((b, j) => ('cache_control' in b && b.cache_control ? [[i, j]] : [])) : [],
    );
    assert.deepEqual(marked, [[2, 0]]);
  });

  it('each tool version has its beta flag and its bash and editor, the computer sized to the screen', () => {
    const screen = { width: 1280, height: 800 };
    const betas = TOOL_VERSIONS.map((v) => toolSet(v, screen).beta);
    assert.deepEqual(betas, ['computer-use-2024-10-22', 'computer-use-2025-01-24', 'computer-use-2025-11-24']);
    assert.deepEqual(toolSet('computer_20241022', screen).tools, [
      { type: 'computer_20241022', name: 'computer', display_width_px: 1280, display_height_px: 800 },
      { type: 'bash_20241022', name: 'bash' },
      { type: 'text_editor_20241022', name: 'str_replace_editor' },
    ]);
    assert.deepEqual(toolSet('computer_20251124', screen).tools[0], {
      type: 'computer_20251124',
      name: 'computer',
      display_width_px: 1280,
      display_height_px: 800,
      enable_zoom: true,
    });
    assert.equal(toolSet('computer_20250124', screen).editorName, 'str_replace_based_edit_tool');
  });

  it('a stored transcript keeps the text and drops the image data', () => {
    const stored = storableTranscript([turn('a', image('x'.repeat(10_000)), { type: 'text', text: 'short' })]);
    assert.ok(stored.length < 1000);
    assert.match(stored, /\[10000 base64 characters\]/);
    assert.match(stored, /short/);
  });
});

describe('runs: the event stream', () => {
  const sink = () => {
    // A reader that reads nothing: every write stays buffered, as on a stalled TCP connection.
    const out = new Writable({ write: () => undefined });
    let destroyed = false;
    let ended = false;
    const view = {
      write: (chunk: string) => out.write(chunk),
      end: () => (ended = true),
      destroy: () => (destroyed = true),
      get writableLength() {
        return out.writableLength;
      },
    };
    return { view, state: () => ({ destroyed, ended, buffered: out.writableLength }) };
  };

  it('drops a client that leaves more than the limit unread, and stops writing to it', () => {
    const { view, state } = sink();
    let unsubscribed = 0;
    const stream = new EventStream<{ type: string; text?: string }>(
      view,
      10_000,
      () => unsubscribed++,
      (e) => e.type === 'end',
    );
    for (let i = 0; i < 100; i++) stream.send({ type: 'text', text: 'x'.repeat(500) });
    assert.equal(stream.dropped, true);
    assert.equal(state().destroyed, true);
    assert.ok(state().buffered < 10_000 + 1000, `no more than the limit and one event buffered (${state().buffered})`);
    assert.equal(unsubscribed, 1);
  });

  it('ends after the last event, numbering and naming each', () => {
    const chunks: string[] = [];
    let ended = false;
    const stream = new EventStream<{ type: string }>(
      { write: (c) => chunks.push(c) > 0, end: () => (ended = true), destroy: () => undefined, writableLength: 0 },
      10_000,
      () => undefined,
      (e) => e.type === 'end',
    );
    stream.send({ type: 'text' });
    stream.send({ type: 'end' });
    stream.send({ type: 'text' });
    assert.deepEqual(chunks, ['id: 0\nevent: text\ndata: {"type":"text"}\n\n', 'id: 1\nevent: end\ndata: {"type":"end"}\n\n']);
    assert.equal(ended, true);
  });
});
