import { InvalidRequestError } from '../errors.js';
import { keyCombo, parseKeySequence, type KeyCombo } from './keyboard-keys.js';
import type { Point, Scaler } from './scaling.js';

/**
 * The computer-use tool input (shared/computer-use/ACTIONS.md) of computer_20241022,
 * computer_20250124 and computer_20251124, validated field by field so that a model's
 * mistake comes back as a message it can read and act on. Coordinates are checked in the
 * model's (possibly scaled) space and converted to the real screen here, once.
 */
export const ACTIONS = [
  'key',
  'type',
  'mouse_move',
  'left_click',
  'left_click_drag',
  'right_click',
  'middle_click',
  'double_click',
  'triple_click',
  'left_mouse_down',
  'left_mouse_up',
  'scroll',
  'hold_key',
  'wait',
  'screenshot',
  'cursor_position',
  'zoom',
] as const;
export type ActionName = (typeof ACTIONS)[number];

export const CLICK_ACTIONS = ['left_click', 'right_click', 'middle_click', 'double_click', 'triple_click'] as const;
export type ClickAction = (typeof CLICK_ACTIONS)[number];
export const SCROLL_DIRECTIONS = ['up', 'down', 'left', 'right'] as const;
export type ScrollDirection = (typeof SCROLL_DIRECTIONS)[number];

export type ComputerAction =
  | { action: 'screenshot' | 'cursor_position' }
  | { action: 'left_mouse_down' | 'left_mouse_up' }
  | { action: 'mouse_move'; coordinate: Point }
  | { action: ClickAction; coordinate?: Point; modifier?: KeyCombo }
  | { action: 'left_click_drag'; start?: Point; coordinate: Point }
  | { action: 'scroll'; direction: ScrollDirection; amount: number; coordinate?: Point; modifier?: KeyCombo }
  | { action: 'type'; text: string }
  | { action: 'key'; combos: KeyCombo[] }
  | { action: 'hold_key'; key: KeyCombo; seconds: number }
  | { action: 'wait'; seconds: number }
  | { action: 'zoom'; region: { x0: number; y0: number; x1: number; y1: number } }
  /**
   * Not in Anthropic's contract (parseAction never makes it): the back and forward buttons
   * (X buttons 8 and 9) that OpenAI's click names, so that vendor adapters stay a
   * translation into this one list.
   */
  | { action: 'button_click'; button: SideButton; coordinate?: Point; modifier?: KeyCombo };

/** X's back (8) and forward (9) mouse buttons. */
export type SideButton = 8 | 9;
/** Every action the computer runs: the contract's, and the internal ones above. */
export type RunnableActionName = ComputerAction['action'];

/** Which fields each action takes; any other field is refused by name. */
const FIELDS: Record<ActionName, { required: string[]; optional: string[] }> = {
  key: { required: ['text'], optional: [] },
  type: { required: ['text'], optional: [] },
  mouse_move: { required: ['coordinate'], optional: [] },
  left_click: { required: [], optional: ['coordinate', 'key'] },
  right_click: { required: [], optional: ['coordinate', 'key'] },
  middle_click: { required: [], optional: ['coordinate', 'key'] },
  double_click: { required: [], optional: ['coordinate', 'key'] },
  triple_click: { required: [], optional: ['coordinate', 'key'] },
  left_click_drag: { required: ['coordinate'], optional: ['start_coordinate'] },
  left_mouse_down: { required: [], optional: [] },
  left_mouse_up: { required: [], optional: [] },
  scroll: { required: ['scroll_direction', 'scroll_amount'], optional: ['coordinate', 'text'] },
  hold_key: { required: ['text', 'duration'], optional: [] },
  wait: { required: ['duration'], optional: [] },
  screenshot: { required: [], optional: [] },
  cursor_position: { required: [], optional: [] },
  zoom: { required: ['region'], optional: [] },
};

/** Longest text accepted for `type`; longer input is refused rather than typed for minutes. */
export const MAX_TYPE_LENGTH = 20_000;
/** The contract's bound on hold_key and wait. */
export const MAX_DURATION_SECONDS = 100;
const MAX_SCROLL_AMOUNT = 100;

export function isAction(name: string): name is ActionName {
  return (ACTIONS as readonly string[]).includes(name);
}

export function parseAction(input: unknown, scaler: Scaler): ComputerAction {
  if (typeof input !== 'object' || input === null || Array.isArray(input)) {
    throw new InvalidRequestError('the input must be a JSON object with an "action" field');
  }
  const body = input as Record<string, unknown>;
  const action = body.action;
  if (action === undefined) throw new InvalidRequestError('action is required');
  if (typeof action !== 'string') throw new InvalidRequestError('action must be a string');
  if (!isAction(action)) throw new InvalidRequestError(`action "${action.slice(0, 40)}" is unknown; expected one of ${ACTIONS.join(', ')}`);
  const { required, optional } = FIELDS[action];
  for (const field of Object.keys(body)) {
    if (field !== 'action' && !required.includes(field) && !optional.includes(field)) {
      throw new InvalidRequestError(`${field} is not accepted for ${action}`);
    }
  }
  for (const field of required) {
    if (body[field] === undefined) throw new InvalidRequestError(`${field} is required for ${action}`);
  }
  const point = (field: string) => scaler.toScreen(parseCoordinate(body[field], field, scaler));
  const optionalPoint = (field: string) => (body[field] === undefined ? undefined : point(field));
  const modifier = (field: string) => (body[field] === undefined ? undefined : parseSingleKey(body[field], field));

  switch (action) {
    case 'screenshot':
    case 'cursor_position':
    case 'left_mouse_down':
    case 'left_mouse_up':
      return { action };
    case 'mouse_move':
      return { action, coordinate: point('coordinate') };
    case 'left_click':
    case 'right_click':
    case 'middle_click':
    case 'double_click':
    case 'triple_click':
      return withDefined({ action, coordinate: optionalPoint('coordinate'), modifier: modifier('key') });
    case 'left_click_drag':
      return withDefined({ action, start: optionalPoint('start_coordinate'), coordinate: point('coordinate') });
    case 'scroll':
      return withDefined({
        action,
        direction: parseDirection(body.scroll_direction),
        amount: parseAmount(body.scroll_amount),
        coordinate: optionalPoint('coordinate'),
        modifier: modifier('text'),
      });
    case 'type':
      return { action, text: parseTypedText(body.text) };
    case 'key':
      return { action, combos: parseKeySequence(body.text, 'text') };
    case 'hold_key':
      return { action, key: parseSingleKey(body.text, 'text'), seconds: parseDuration(body.duration) };
    case 'wait':
      return { action, seconds: parseDuration(body.duration) };
    case 'zoom':
      return { action, region: parseRegion(body.region, scaler) };
  }
}

/** Drops undefined optional fields, so results compare and serialise cleanly. */
function withDefined<T extends object>(value: T): T {
  return Object.fromEntries(Object.entries(value).filter(([, v]) => v !== undefined)) as T;
}

function isNonNegativeInteger(v: unknown): v is number {
  return typeof v === 'number' && Number.isInteger(v) && v >= 0;
}

export function parseCoordinate(value: unknown, field: string, scaler: Scaler): Point {
  if (!Array.isArray(value) || value.length !== 2) {
    throw new InvalidRequestError(`${field} must be an array of two integers [x, y]`);
  }
  const [x, y] = value as unknown[];
  for (const [name, v] of [
    ['x', x],
    ['y', y],
  ] as const) {
    if (!isNonNegativeInteger(v)) {
      throw new InvalidRequestError(`${field} ${name} must be a non-negative integer, got ${JSON.stringify(v)}`);
    }
  }
  const point = { x: x as number, y: y as number };
  const { width, height } = scaler.model;
  if (point.x >= width || point.y >= height) {
    throw new InvalidRequestError(`${field} [${point.x}, ${point.y}] is outside the screen (${width}x${height}: x must be < ${width}, y < ${height})`);
  }
  return point;
}

/** A key held during a click or scroll, or by hold_key: one combo, no sequence. */
function parseSingleKey(value: unknown, field: string): KeyCombo {
  if (typeof value !== 'string' || value.trim() === '') throw new InvalidRequestError(`${field} must be a non-empty key name such as "shift"`);
  if (/\s/.test(value.trim()) || value.length > 200) {
    throw new InvalidRequestError(`${field} must be a single key or combo such as "shift" or "ctrl+shift", got ${JSON.stringify(value.slice(0, 40))}`);
  }
  return keyCombo(value.trim(), field);
}

function parseDirection(value: unknown): ScrollDirection {
  if (typeof value !== 'string' || !(SCROLL_DIRECTIONS as readonly string[]).includes(value)) {
    throw new InvalidRequestError(`scroll_direction must be one of ${SCROLL_DIRECTIONS.join(', ')}, got ${JSON.stringify(value)}`);
  }
  return value as ScrollDirection;
}

function parseAmount(value: unknown): number {
  if (!isNonNegativeInteger(value)) throw new InvalidRequestError(`scroll_amount must be a non-negative integer, got ${JSON.stringify(value)}`);
  if (value > MAX_SCROLL_AMOUNT) throw new InvalidRequestError(`scroll_amount ${value} is too large (at most ${MAX_SCROLL_AMOUNT})`);
  return value;
}

function parseDuration(value: unknown): number {
  if (typeof value !== 'number' || !Number.isFinite(value)) throw new InvalidRequestError(`duration must be a number of seconds, got ${JSON.stringify(value)}`);
  if (value < 0) throw new InvalidRequestError(`duration=${value} must be non-negative`);
  if (value > MAX_DURATION_SECONDS) throw new InvalidRequestError(`duration=${value} is too long (at most ${MAX_DURATION_SECONDS} seconds)`);
  return value;
}

function parseRegion(value: unknown, scaler: Scaler): { x0: number; y0: number; x1: number; y1: number } {
  if (!Array.isArray(value) || value.length !== 4 || !value.every(isNonNegativeInteger)) {
    throw new InvalidRequestError('region must be an array of four non-negative integers [x0, y0, x1, y1]');
  }
  const [x0, y0, x1, y1] = value as [number, number, number, number];
  if (x1 <= x0 || y1 <= y0) throw new InvalidRequestError(`region [${x0}, ${y0}, ${x1}, ${y1}] must have x1 > x0 and y1 > y0`);
  const { width, height } = scaler.model;
  if (x1 > width || y1 > height) {
    throw new InvalidRequestError(`region [${x0}, ${y0}, ${x1}, ${y1}] is outside the screen (${width}x${height})`);
  }
  // The far corner is exclusive: scale it as a length, not as a pixel position.
  const a = scaler.toScreen({ x: x0, y: y0 });
  const b = {
    x: Math.min(scaler.screen.width, Math.round((x1 * scaler.screen.width) / width)),
    y: Math.min(scaler.screen.height, Math.round((y1 * scaler.screen.height) / height)),
  };
  return { x0: a.x, y0: a.y, x1: Math.max(b.x, a.x + 1), y1: Math.max(b.y, a.y + 1) };
}

function parseTypedText(value: unknown): string {
  if (typeof value !== 'string' || value.length === 0) throw new InvalidRequestError('text must be a non-empty string');
  if (value.length > MAX_TYPE_LENGTH) {
    throw new InvalidRequestError(`text is ${value.length} characters long; at most ${MAX_TYPE_LENGTH} can be typed in one action`);
  }
  if (value.includes('\0')) throw new InvalidRequestError('text cannot contain a NUL character');
  return value;
}
