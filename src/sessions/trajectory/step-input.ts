/**
 * What is stored of a step's input and output. The input is kept as the model sent it, with
 * two exceptions: text typed into the desktop (the computer tool's `text`: `type`, and the key
 * sequences of `key` and `hold_key`) is replaced by its length unless the session opted in at
 * create (it may be a password the model was given), and every string is cut to a bounded
 * length, so a hostile model cannot make one step large.
 */
export const MAX_STORED_STRING_CHARS = 8 * 1024;
export const MAX_STORED_OUTPUT_CHARS = 16 * 1024;
const MAX_DEPTH = 4;
const MAX_KEYS = 32;

/** The input to store; `typedText: 'length'` turns a computer action's `text` into `textLength`. */
export function storedInput(input: unknown, typedText: 'keep' | 'length', computer: boolean): Record<string, unknown> {
  if (typeof input !== 'object' || input === null || Array.isArray(input)) return { value: bounded(input, 0) };
  const stored: Record<string, unknown> = {};
  for (const [key, value] of Object.entries(input as Record<string, unknown>).slice(0, MAX_KEYS)) {
    if (computer && key === 'text' && typedText === 'length' && typeof value === 'string') {
      stored.textLength = value.length;
      continue;
    }
    stored[key] = bounded(value, 1);
  }
  return stored;
}

/** Output text, cut to a bounded length with a note saying how much was left out. */
export function storedOutput(text: string | undefined): string | null {
  if (text === undefined) return null;
  return cut(text, MAX_STORED_OUTPUT_CHARS);
}

function bounded(value: unknown, depth: number): unknown {
  if (typeof value === 'string') return cut(value, MAX_STORED_STRING_CHARS);
  if (value === null || typeof value === 'number' || typeof value === 'boolean') return value;
  if (depth >= MAX_DEPTH) return '[nested too deep]';
  if (Array.isArray(value)) return value.slice(0, MAX_KEYS).map((item) => bounded(item, depth + 1));
  if (typeof value === 'object') {
    return Object.fromEntries(Object.entries(value as Record<string, unknown>).slice(0, MAX_KEYS).map(([k, v]) => [k.slice(0, 64), bounded(v, depth + 1)]));
  }
  return null;
}

function cut(text: string, max: number): string {
  return text.length <= max ? text : `${text.slice(0, max)}… [${text.length - max} more characters not stored]`;
}

/** The action (computer) or command (editor) a step's input names, when it names one. */
export function actionName(input: unknown, tool: string): string | null {
  if (typeof input !== 'object' || input === null) return null;
  const fields = input as Record<string, unknown>;
  const name = tool === 'computer' || tool === 'actions' ? fields.action : tool === 'bash' ? (fields.restart === true ? 'restart' : 'command') : fields.command;
  return typeof name === 'string' && /^[a-z_]{1,32}$/.test(name) ? name : null;
}
