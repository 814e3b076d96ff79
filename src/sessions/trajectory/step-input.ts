/**
 * What is stored of a step's input and output. The input is kept as the model sent it, with
 * two exceptions: text typed into the desktop is replaced by its length unless the session
 * opted in at create (it may be a password the model was given), and every string is cut to a
 * bounded length, so a hostile model cannot make one step large. Typed text is every `text`
 * and `keys` field at any depth of a desktop tool's input, wherever the vendor put it: the
 * computer tool's `text` (`type`, and the key sequences of `key` and `hold_key`), OpenAI's
 * `action.text` / `actions[i].text` and `keys`, Gemini's `args.text` and `args.keys`, the
 * clipboard's `text`.
 */
export const MAX_STORED_STRING_CHARS = 8 * 1024;
export const MAX_STORED_OUTPUT_CHARS = 16 * 1024;
const MAX_DEPTH = 4;
const MAX_KEYS = 32;

/** The fields of a desktop tool's input that carry typed text (at any depth). */
const TYPED_FIELDS = new Set(['text', 'keys']);

/**
 * The input to store; `typedText: 'length'` turns typed text (`text`, `keys`) of a desktop
 * tool's input (`typing`) into `textLength` / `keysLength`, at any depth.
 */
export function storedInput(input: unknown, typedText: 'keep' | 'length', typing: boolean): Record<string, unknown> {
  const mask = typing && typedText === 'length';
  if (typeof input !== 'object' || input === null || Array.isArray(input)) return { value: bounded(input, 0, mask) };
  return boundedObject(input as Record<string, unknown>, 0, mask);
}

/** Typed text as what is stored of it: its length (a key list's: its characters, joined as `a+b`). */
function typedLength(value: unknown): number | undefined {
  if (typeof value === 'string') return value.length;
  if (Array.isArray(value) && value.every((v) => typeof v === 'string')) return value.join('+').length;
  return undefined;
}

/** Output text, cut to a bounded length with a note saying how much was left out. */
export function storedOutput(text: string | undefined): string | null {
  if (text === undefined) return null;
  return cut(text, MAX_STORED_OUTPUT_CHARS);
}

function bounded(value: unknown, depth: number, mask: boolean): unknown {
  if (typeof value === 'string') return cut(value, MAX_STORED_STRING_CHARS);
  if (value === null || typeof value === 'number' || typeof value === 'boolean') return value;
  if (depth >= MAX_DEPTH) return '[nested too deep]';
  if (Array.isArray(value)) return value.slice(0, MAX_KEYS).map((item) => bounded(item, depth + 1, mask));
  if (typeof value === 'object') return boundedObject(value as Record<string, unknown>, depth, mask);
  return null;
}

function boundedObject(value: Record<string, unknown>, depth: number, mask: boolean): Record<string, unknown> {
  const stored: Record<string, unknown> = {};
  for (const [key, v] of Object.entries(value).slice(0, MAX_KEYS)) {
    const length = mask && TYPED_FIELDS.has(key) ? typedLength(v) : undefined;
    if (length !== undefined) stored[`${key}Length`] = length;
    // Typed text too deep to look into is not kept at all (bounded() would keep its summary only, never its text).
    else if (mask && TYPED_FIELDS.has(key)) stored[`${key}Length`] = null;
    else stored[key.slice(0, 64)] = bounded(v, depth + 1, mask);
  }
  return stored;
}

function cut(text: string, max: number): string {
  return text.length <= max ? text : `${text.slice(0, max)}… [${text.length - max} more characters not stored]`;
}

/** The action (computer, desktop, a vendor's call) or command (editor) a step's input names, when it names one. */
export function actionName(input: unknown, tool: string): string | null {
  if (typeof input !== 'object' || input === null) return null;
  const fields = input as Record<string, unknown>;
  const name = nameField(fields, tool);
  return typeof name === 'string' && /^[a-z_]{1,32}$/.test(name) ? name : null;
}

function nameField(fields: Record<string, unknown>, tool: string): unknown {
  switch (tool) {
    case 'computer':
    case 'actions':
    case 'desktop':
      return fields.action;
    case 'bash':
      return fields.restart === true ? 'restart' : 'command';
    case 'openai-computer': {
      // One action, or a batch of them.
      const action = fields.action;
      if (typeof action === 'object' && action !== null) return (action as Record<string, unknown>).type;
      return Array.isArray(fields.actions) ? 'batch' : null;
    }
    case 'gemini-computer':
      return fields.name;
    default:
      return fields.command;
  }
}

/** The tools whose input may carry typed text (storedInput masks it). */
export function isTypingTool(tool: string): boolean {
  return tool === 'computer' || tool === 'actions' || tool === 'desktop' || tool === 'openai-computer' || tool === 'gemini-computer';
}
