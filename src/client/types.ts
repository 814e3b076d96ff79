import type { ImageMediaType } from './screenshot-format.js';

/**
 * The shapes the API answers with and takes. Sessions, templates, action results and the
 * create and update bodies are generated from the server's schemas (api-types.ts, by
 * scripts/generate-client-types.ts), so they cannot drift; the tool inputs and results below
 * are the model vendors' contracts, which the server takes as the model sent them.
 */
export type { ActionResult, CreateOptions, ErrorBody, ErrorCode, KeepaliveOptions, SessionInfo, TemplateInfo, TimeoutUpdate } from './api-types.js';

/** How deep a pause goes (docs/pause.md). */
export type PauseMode = 'memory' | 'disk';

/** A computer-use tool input, as a model sends it. */
export interface ComputerToolInput {
  action: string;
  coordinate?: [number, number];
  start_coordinate?: [number, number];
  text?: string;
  key?: string;
  scroll_direction?: 'up' | 'down' | 'left' | 'right';
  scroll_amount?: number;
  duration?: number;
  region?: [number, number, number, number];
  [field: string]: unknown;
}

/** A bash_20250124 tool_use input. */
export interface BashToolInput {
  command?: string;
  restart?: boolean;
  [field: string]: unknown;
}

/** A text_editor_20250728 (str_replace_based_edit_tool) tool_use input. */
export interface EditorToolInput {
  command: 'view' | 'create' | 'str_replace' | 'insert' | (string & {});
  path: string;
  view_range?: [number, number];
  file_text?: string;
  old_str?: string;
  new_str?: string;
  insert_line?: number;
  insert_text?: string;
  [field: string]: unknown;
}

/** The text of a tool result (its text blocks joined), for callers that only read it. */
export function resultText(result: ToolResult): string {
  return result.content.flatMap((block) => (block.type === 'text' ? [block.text] : [])).join('\n');
}

/** The tool_result content of the Messages API, as the tool endpoints answer. */
export interface ToolResult {
  content: Array<{ type: 'text'; text: string } | { type: 'image'; source: { type: 'base64'; media_type: ImageMediaType; data: string } }>;
  is_error: boolean;
}
