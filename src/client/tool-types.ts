// The tool inputs and results of the Messages API as the client sends and receives them.

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

/** The tool_result content of the Messages API, as the tool endpoints answer. */
export interface ToolResult {
  content: Array<
    { type: 'text'; text: string } | { type: 'image'; source: { type: 'base64'; media_type: 'image/png'; data: string } }
  >;
  is_error: boolean;
}
