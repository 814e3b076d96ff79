import type { ImageMediaType } from './screenshot-format.js';

// What the computer-use routes answer, as the client returns it.

/** The text of a tool result (its text blocks joined), for callers that only read it. */
export function resultText(result: ToolResult): string {
  return result.content.flatMap((block) => (block.type === 'text' ? [block.text] : [])).join('\n');
}

/** The tool_result content of the Messages API, as the tool endpoints answer. */
export interface ToolResult {
  content: Array<
    { type: 'text'; text: string } | { type: 'image'; source: { type: 'base64'; media_type: ImageMediaType; data: string } }
  >;
  is_error: boolean;
}

export interface ActionResult {
  action: string;
  output?: string;
  cursor?: { x: number; y: number };
  image?: { mediaType: string; data: string };
  settleMs?: number;
  durationMs: number;
}
