import { InvalidRequestError } from '../errors.js';

/**
 * The computer-use tool input (shared/computer-use/ACTIONS.md), validated field by field so
 * that a model's mistake comes back as a message it can read and act on. This release
 * serves the core actions; the rest of the contract is refused by name, never guessed at.
 */
export const SUPPORTED_ACTIONS = [
  'screenshot',
  'cursor_position',
  'mouse_move',
  'left_click',
  'right_click',
  'middle_click',
  'double_click',
  'type',
  'key',
] as const;
export type SupportedAction = (typeof SUPPORTED_ACTIONS)[number];

const CONTRACT_ACTIONS = new Set<string>([
  ...SUPPORTED_ACTIONS,
  'left_click_drag',
  'left_mouse_down',
  'left_mouse_up',
  'scroll',
  'hold_key',
  'wait',
  'triple_click',
  'zoom',
]);

export interface Point {
  x: number;
  y: number;
}

export type ComputerAction =
  | { action: 'screenshot' | 'cursor_position' }
  | { action: 'mouse_move'; coordinate: Point }
  | { action: 'left_click' | 'right_click' | 'middle_click' | 'double_click'; coordinate?: Point; key?: string }
  | { action: 'type'; text: string }
  | { action: 'key'; text: string };

const FIELDS: Record<SupportedAction, { required: string[]; optional: string[] }> = {
  screenshot: { required: [], optional: [] },
  cursor_position: { required: [], optional: [] },
  mouse_move: { required: ['coordinate'], optional: [] },
  left_click: { required: [], optional: ['coordinate', 'key'] },
  right_click: { required: [], optional: ['coordinate', 'key'] },
  middle_click: { required: [], optional: ['coordinate', 'key'] },
  double_click: { required: [], optional: ['coordinate', 'key'] },
  type: { required: ['text'], optional: [] },
  key: { required: ['text'], optional: [] },
};

/** Longest text accepted for `type`; longer input is refused rather than typed for minutes. */
export const MAX_TYPE_LENGTH = 20_000;
/** A key combo is keysym names joined by '+': letters, digits and underscores only. */
const KEY_COMBO = /^[A-Za-z0-9_]+(\+[A-Za-z0-9_]+)*$/;
const MAX_KEY_LENGTH = 200;

export interface Screen {
  width: number;
  height: number;
}

export function parseAction(input: unknown, screen: Screen): ComputerAction {
  if (typeof input !== 'object' || input === null || Array.isArray(input)) {
    throw new InvalidRequestError('the body must be a JSON object with an "action" field');
  }
  const body = input as Record<string, unknown>;
  const action = body.action;
  if (typeof action !== 'string') throw new InvalidRequestError('action is required and must be a string');
  if (!isSupported(action)) {
    if (CONTRACT_ACTIONS.has(action)) {
      throw new InvalidRequestError(`action ${action} is not supported by this server yet; supported: ${SUPPORTED_ACTIONS.join(', ')}`);
    }
    throw new InvalidRequestError(`action "${action}" is unknown; expected one of ${[...CONTRACT_ACTIONS].join(', ')}`);
  }
  const { required, optional } = FIELDS[action];
  for (const field of Object.keys(body)) {
    if (field !== 'action' && !required.includes(field) && !optional.includes(field)) {
      throw new InvalidRequestError(`${field} is not accepted for ${action}`);
    }
  }
  for (const field of required) {
    if (body[field] === undefined) throw new InvalidRequestError(`${field} is required for ${action}`);
  }

  switch (action) {
    case 'screenshot':
    case 'cursor_position':
      return { action };
    case 'mouse_move':
      return { action, coordinate: parseCoordinate(body.coordinate, screen) };
    case 'left_click':
    case 'right_click':
    case 'middle_click':
    case 'double_click': {
      const result: ComputerAction = { action };
      if (body.coordinate !== undefined) result.coordinate = parseCoordinate(body.coordinate, screen);
      if (body.key !== undefined) result.key = parseKeyCombo(body.key, 'key');
      return result;
    }
    case 'type':
      return { action, text: parseTypedText(body.text) };
    case 'key':
      return { action, text: parseKeyCombo(body.text, 'text') };
  }
}

function isSupported(action: string): action is SupportedAction {
  return (SUPPORTED_ACTIONS as readonly string[]).includes(action);
}

export function parseCoordinate(value: unknown, screen: Screen): Point {
  if (!Array.isArray(value) || value.length !== 2) {
    throw new InvalidRequestError('coordinate must be an array of two integers [x, y]');
  }
  const [x, y] = value as unknown[];
  for (const [name, v] of [['x', x], ['y', y]] as const) {
    if (typeof v !== 'number' || !Number.isInteger(v) || v < 0) {
      throw new InvalidRequestError(`coordinate ${name} must be a non-negative integer, got ${JSON.stringify(v)}`);
    }
  }
  const point = { x: x as number, y: y as number };
  if (point.x >= screen.width || point.y >= screen.height) {
    throw new InvalidRequestError(
      `coordinate [${point.x}, ${point.y}] is outside the screen (${screen.width}x${screen.height}: x must be < ${screen.width}, y < ${screen.height})`,
    );
  }
  return point;
}

export function parseKeyCombo(value: unknown, field: string): string {
  if (typeof value !== 'string' || value.length === 0) throw new InvalidRequestError(`${field} must be a non-empty string`);
  if (value.length > MAX_KEY_LENGTH || !KEY_COMBO.test(value)) {
    throw new InvalidRequestError(
      `${field} must be an xdotool key combo such as "ctrl+s" or "Return" (key names joined by "+"), got ${JSON.stringify(value.slice(0, 80))}`,
    );
  }
  return value;
}

function parseTypedText(value: unknown): string {
  if (typeof value !== 'string' || value.length === 0) throw new InvalidRequestError('text must be a non-empty string');
  if (value.length > MAX_TYPE_LENGTH) {
    throw new InvalidRequestError(`text is ${value.length} characters long; at most ${MAX_TYPE_LENGTH} can be typed in one action`);
  }
  if (value.includes('\0')) throw new InvalidRequestError('text cannot contain a NUL character');
  return value;
}
