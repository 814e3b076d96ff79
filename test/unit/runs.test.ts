import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { BetaMessageParam } from '@anthropic-ai/sdk/resources/beta/messages/messages';
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

describe('runs: the loop\'s pure parts', () => {
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
    const marked = messages.flatMap((m, i) => (Array.isArray(m.content) ? m.content.flatMap((b, j) => ('cache_control' in b && b.cache_control ? [[i, j]] : [])) : []));
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
    assert.deepEqual(toolSet('computer_20251124', screen).tools[0], { type: 'computer_20251124', name: 'computer', display_width_px: 1280, display_height_px: 800, enable_zoom: true });
    assert.equal(toolSet('computer_20250124', screen).editorName, 'str_replace_based_edit_tool');
  });

  it('a stored transcript keeps the text and drops the image data', () => {
    const stored = storableTranscript([turn('a', image('x'.repeat(10_000)), { type: 'text', text: 'short' })]);
    assert.ok(stored.length < 1000);
    assert.match(stored, /\[10000 base64 characters\]/);
    assert.match(stored, /short/);
  });
});
