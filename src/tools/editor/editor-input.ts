import { ToolError } from '../tool-error.js';
import { describeType } from '../input-checks.js';

export const TOOL_NAME = 'str_replace_based_edit_tool';
export const COMMANDS = ['view', 'create', 'str_replace', 'insert'] as const;
export type EditorCommandName = (typeof COMMANDS)[number];

/** A checked `text_editor_20250728` tool_use input. */
export type EditorRequest =
  | { command: 'view'; path: string; viewRange: [number, number] | undefined }
  | { command: 'create'; path: string; fileText: string }
  | { command: 'str_replace'; path: string; oldStr: string; newStr: string }
  | { command: 'insert'; path: string; insertLine: number; insertText: string };

/** The parameters each command takes besides `command` and `path`. */
const PARAMETERS: Record<EditorCommandName, { required: string[]; optional: string[] }> = {
  view: { required: [], optional: ['view_range'] },
  create: { required: ['file_text'], optional: [] },
  str_replace: { required: ['old_str'], optional: ['new_str'] },
  insert: { required: ['insert_line', 'insert_text'], optional: [] },
};

/**
 * Checks a tool_use input. Messages follow Anthropic's reference implementation
 * (claude-quickstarts computer_use_demo/tools/edit.py, EditTool20250728) where it has one,
 * and name the parameter and what it should be everywhere else.
 */
export function parseEditorInput(input: unknown): EditorRequest {
  if (typeof input !== 'object' || input === null || Array.isArray(input)) {
    throw new ToolError(`The ${TOOL_NAME} input must be a JSON object with \`command\` and \`path\`.`);
  }
  // null is taken as "not given": some clients send every optional field.
  const fields = Object.fromEntries(Object.entries(input as Record<string, unknown>).filter(([, v]) => v !== null));
  const command = fields.command;
  if (command === undefined) {
    throw new ToolError(`Parameter \`command\` is required; it is one of: ${COMMANDS.join(', ')}.`);
  }
  if (typeof command !== 'string' || !(COMMANDS as readonly string[]).includes(command)) {
    const shown = typeof command === 'string' ? command : describeType(command);
    throw new ToolError(`Unrecognized command ${shown}. The allowed commands for the ${TOOL_NAME} tool are: ${COMMANDS.join(', ')}`);
  }
  const name = command as EditorCommandName;
  checkParameterNames(name, Object.keys(fields));
  const path = stringField(fields, 'path', name);
  if (path.includes('\0')) throw new ToolError('Parameter `path` contains a NUL character, which no path can.');
  if (!path.startsWith('/')) {
    const suggested = `/${path.replace(/^(\.\/)+/, '')}`;
    throw new ToolError(`The path ${path} is not an absolute path, it should start with \`/\`. Maybe you meant ${suggested}?`);
  }
  switch (name) {
    case 'view':
      return { command: name, path, viewRange: viewRange(fields.view_range) };
    case 'create':
      return { command: name, path, fileText: stringField(fields, 'file_text', name) };
    case 'str_replace':
      return {
        command: name,
        path,
        oldStr: stringField(fields, 'old_str', name),
        newStr: fields.new_str === undefined ? '' : stringField(fields, 'new_str', name),
      };
    case 'insert':
      return { command: name, path, insertLine: insertLine(fields.insert_line), insertText: stringField(fields, 'insert_text', name) };
  }
}

function checkParameterNames(command: EditorCommandName, names: string[]): void {
  const { required, optional } = PARAMETERS[command];
  const accepted = new Set(['command', 'path', ...required, ...optional]);
  for (const name of names) {
    if (accepted.has(name)) continue;
    if (command === 'insert' && name === 'new_str') {
      throw new ToolError('Parameter `new_str` is not used by command: insert; give the text to insert as `insert_text`.');
    }
    const takes = [...required.map((p) => `\`${p}\``), ...optional.map((p) => `optional \`${p}\``)];
    throw new ToolError(`Parameter \`${name}\` is not accepted by command: ${command}; it takes \`path\`${takes.length ? ` and ${takes.join(', ')}` : ''}.`);
  }
}

function stringField(fields: Record<string, unknown>, name: string, command: EditorCommandName): string {
  const value = fields[name];
  if (value === undefined) throw new ToolError(`Parameter \`${name}\` is required for command: ${command}`);
  if (typeof value !== 'string') throw new ToolError(`Parameter \`${name}\` must be a string, got ${describeType(value)}.`);
  return value;
}

function viewRange(value: unknown): [number, number] | undefined {
  // An empty list means "the whole file", as in the reference.
  if (value === undefined || (Array.isArray(value) && value.length === 0)) return undefined;
  if (!Array.isArray(value) || value.length !== 2 || !value.every((n) => Number.isSafeInteger(n))) {
    throw new ToolError('Invalid `view_range`. It should be a list of two integers.');
  }
  return [value[0] as number, value[1] as number];
}

function insertLine(value: unknown): number {
  if (value === undefined) throw new ToolError('Parameter `insert_line` is required for command: insert');
  if (!Number.isSafeInteger(value)) throw new ToolError(`Parameter \`insert_line\` must be an integer, got ${describeType(value)}.`);
  return value as number;
}
