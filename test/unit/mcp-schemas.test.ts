import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { ACTIONS } from '../../src/computer/actions.js';
import {
  bashInput,
  computerInput,
  createInput,
  desktopInput,
  downloadInput,
  editorInput,
  MCP_MAX_FILE_BYTES,
  screenshotInput,
  uploadInput,
} from '../../src/mcp/schemas.js';
import { fromToolResult, imageMimeType } from '../../src/mcp/results.js';

/** The MCP tools' input schemas (src/mcp/schemas.ts): what they let through and what they name when they refuse. */
const ID = 'abc123def4';

function refusal(
  schema: { safeParse(input: unknown): { success: boolean; error?: { issues: Array<{ path: PropertyKey[]; message: string }> } } },
  input: unknown,
): string {
  const result = schema.safeParse(input);
  assert.equal(result.success, false, `expected ${JSON.stringify(input)} to be refused`);
  return (result.error?.issues ?? []).map((issue) => `${issue.path.join('.')}: ${issue.message}`).join('; ');
}

describe('MCP tool input schemas', () => {
  it('take a session id only in its own shape (never a path that would name another route)', () => {
    assert.equal(bashInput.safeParse({ sandbox_id: ID, command: 'ls' }).success, true);
    for (const bad of ['../../v1', 'ABCDEFGHIJ', 'abc', 'abc123def4/', 'abc123def45', '', 7]) {
      assert.match(refusal(screenshotInput, { sandbox_id: bad }), /^sandbox_id: /, String(bad));
    }
  });

  it("computer: every action of the contract, the contract's fields, nothing else", () => {
    for (const action of ACTIONS) assert.equal(computerInput.safeParse({ sandbox_id: ID, action }).success, true, action);
    assert.equal(computerInput.safeParse({ sandbox_id: ID, action: 'left_click_drag', start_coordinate: [1, 2], coordinate: [3, 4] }).success, true);
    assert.equal(
      computerInput.safeParse({ sandbox_id: ID, action: 'scroll', scroll_direction: 'down', scroll_amount: 3, coordinate: [5, 5], text: 'ctrl' }).success,
      true,
    );
    assert.equal(computerInput.safeParse({ sandbox_id: ID, action: 'zoom', region: [0, 0, 10, 10] }).success, true);
    assert.match(refusal(computerInput, { sandbox_id: ID, action: 'explode' }), /^action: /);
    assert.match(refusal(computerInput, { sandbox_id: ID, action: 'left_click', coordinate: [-1, 5] }), /^coordinate\.0: /);
    assert.match(refusal(computerInput, { sandbox_id: ID, action: 'left_click', coordinate: [1.5, 5] }), /^coordinate\.0: /);
    assert.match(refusal(computerInput, { sandbox_id: ID, action: 'left_click', coordinate: [1, 2, 3] }), /^coordinate: /);
    assert.match(refusal(computerInput, { sandbox_id: ID, action: 'scroll', scroll_direction: 'sideways' }), /^scroll_direction: /);
    assert.match(refusal(computerInput, { sandbox_id: ID, action: 'wait', duration: 101 }), /^duration: /);
    assert.match(refusal(computerInput, { sandbox_id: ID, action: 'type', text: 'x'.repeat(20_001) }), /^text: /);
    assert.match(refusal(computerInput, { sandbox_id: ID, action: 'key', text: 'a', command: 'rm -rf /' }), /command/);
  });

  it('the companion tools: bash, the editor, create', () => {
    assert.equal(bashInput.safeParse({ sandbox_id: ID, restart: true }).success, true);
    assert.match(refusal(bashInput, { sandbox_id: ID, command: 'ls', shell: 'zsh' }), /shell/);
    assert.equal(editorInput.safeParse({ sandbox_id: ID, command: 'view', path: '/etc/hostname', view_range: [1, -1] }).success, true);
    assert.match(refusal(editorInput, { sandbox_id: ID, command: 'view', path: 'relative.txt' }), /^path: .*absolute/);
    assert.match(refusal(editorInput, { sandbox_id: ID, command: 'undo_edit', path: '/x' }), /^command: /);
    assert.equal(createInput.safeParse({}).success, true);
    assert.match(refusal(createInput, { width: 100 }), /^width: /);
    assert.match(refusal(createInput, { timeoutSeconds: 60 }), /timeoutSeconds/);
  });

  it('files: base64 only, bounded before decoding; absolute paths; octal modes', () => {
    const max = Buffer.alloc(MCP_MAX_FILE_BYTES).toString('base64');
    assert.equal(uploadInput.safeParse({ sandbox_id: ID, path: '/tmp/a', content_base64: max }).success, true);
    const over = Buffer.alloc(MCP_MAX_FILE_BYTES + 3).toString('base64');
    assert.match(refusal(uploadInput, { sandbox_id: ID, path: '/tmp/a', content_base64: over }), /^content_base64: at most 524288 bytes/);
    assert.match(refusal(uploadInput, { sandbox_id: ID, path: '/tmp/a', content_base64: 'not base64!' }), /^content_base64: must be base64/);
    assert.match(refusal(uploadInput, { sandbox_id: ID, path: '/tmp/a', content_base64: '', mode: '0o777' }), /^mode: /);
    assert.match(refusal(uploadInput, { sandbox_id: ID, path: '/tmp/a', content_base64: '', mode: '4755' }), /^mode: /);
    assert.match(refusal(downloadInput, { sandbox_id: ID, path: 'x' }), /^path: /);
  });

  it('desktop: its actions and fields', () => {
    assert.equal(desktopInput.safeParse({ sandbox_id: ID, action: 'focus_window', window_id: 41943041 }).success, true);
    assert.match(refusal(desktopInput, { sandbox_id: ID, action: 'focus_window', window_id: 0 }), /^window_id: /);
    assert.match(refusal(desktopInput, { sandbox_id: ID, action: 'rm' }), /^action: /);
  });

  it('the JSON Schema MCP clients see is strict and names the required fields', () => {
    const json = computerInput.toJSONSchema() as { required?: string[]; additionalProperties?: unknown; properties: Record<string, unknown> };
    assert.deepEqual(json.required?.sort(), ['action', 'sandbox_id']);
    assert.equal(json.additionalProperties, false);
    assert.deepEqual(Object.keys(json.properties).sort(), [
      'action',
      'coordinate',
      'duration',
      'key',
      'region',
      'sandbox_id',
      'scroll_amount',
      'scroll_direction',
      'start_coordinate',
      'text',
    ]);
  });
});

describe('MCP tool results', () => {
  it('a tool_result becomes MCP content: images with their media type, is_error as isError', () => {
    assert.deepEqual(
      fromToolResult({
        content: [
          { type: 'text', text: 'hi' },
          { type: 'image', source: { type: 'base64', media_type: 'image/webp', data: 'AAAA' } },
        ],
        is_error: false,
      }),
      {
        content: [
          { type: 'text', text: 'hi' },
          { type: 'image', data: 'AAAA', mimeType: 'image/webp' },
        ],
      },
    );
    assert.deepEqual(fromToolResult({ content: [{ type: 'text', text: 'bad' }], is_error: true }), { content: [{ type: 'text', text: 'bad' }], isError: true });
    assert.deepEqual(fromToolResult({ content: [], is_error: false }), { content: [{ type: 'text', text: 'done' }] });
  });

  it("names an image's type by its bytes", () => {
    assert.equal(imageMimeType(Buffer.from('89504e470d0a1a0a', 'hex')), 'image/png');
    assert.equal(imageMimeType(Buffer.from('ffd8ffe000104a46', 'hex')), 'image/jpeg');
    assert.equal(imageMimeType(Buffer.concat([Buffer.from('RIFF'), Buffer.alloc(4), Buffer.from('WEBPVP8 ')])), 'image/webp');
  });
});
