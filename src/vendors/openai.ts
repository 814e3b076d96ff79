import type { ComputerAction, ScrollDirection } from '../computer/actions.js';
import type { KeyCombo } from '../computer/keyboard-keys.js';
import type { Point, Scaler } from '../computer/scaling.js';
import { InvalidRequestError } from '../errors.js';
import { integer, objectOf, onlyFields, typedText, type Fields } from './fields.js';
import { vendorKeyList } from './key-names.js';

/**
 * OpenAI computer-use `computer_call` actions (the Responses API's computer tool) as our own
 * action list (computer/actions.ts), run by the same code as /actions. Coordinates are in the
 * session's model space, the display size its tool definition declares (tool-definitions.ts):
 * scaled like the computer tool's, so one session reads the same to every vendor.
 */
export const OPENAI_ACTIONS = ['click', 'double_click', 'drag', 'keypress', 'move', 'scroll', 'type', 'wait', 'screenshot'] as const;
type OpenAIActionType = (typeof OPENAI_ACTIONS)[number];

/** The batched form's bound: a model's batch is a handful of steps, not a script. */
export const MAX_OPENAI_ACTIONS = 50;
/** A drag's path: its start, its end, and the points between. */
export const MAX_DRAG_POINTS = 100;
/** OpenAI's scroll is in pixels; a wheel notch scrolls about this much in X toolkits and Firefox. */
export const PIXELS_PER_NOTCH = 100;
const MAX_NOTCHES = 100;
/** `wait` has no duration in OpenAI's contract; its reference loop waits a second. */
const WAIT_SECONDS = 1;

const BUTTONS = ['left', 'right', 'wheel', 'back', 'forward'] as const;

const FIELDS: Record<OpenAIActionType, { required: string[]; optional: string[] }> = {
  click: { required: ['x', 'y'], optional: ['button', 'keys'] },
  double_click: { required: ['x', 'y'], optional: ['keys'] },
  drag: { required: ['path'], optional: [] },
  keypress: { required: ['keys'], optional: [] },
  move: { required: ['x', 'y'], optional: [] },
  scroll: { required: ['x', 'y', 'scroll_x', 'scroll_y'], optional: ['keys'] },
  type: { required: ['text'], optional: [] },
  wait: { required: [], optional: [] },
  screenshot: { required: [], optional: [] },
};

/** The actions of one computer_call: its `action`, or its batched `actions`. */
export function openaiActionList(body: Fields): unknown[] {
  if (body.action !== undefined && body.actions !== undefined) throw new InvalidRequestError('send either action or actions, not both');
  if (body.action !== undefined) return [body.action];
  if (!Array.isArray(body.actions)) throw new InvalidRequestError('action (an object) or actions (an array) is required');
  if (body.actions.length === 0) throw new InvalidRequestError('actions must not be empty');
  if (body.actions.length > MAX_OPENAI_ACTIONS) throw new InvalidRequestError(`actions has ${body.actions.length} items; at most ${MAX_OPENAI_ACTIONS}`);
  return body.actions;
}

/** All of a call's actions, translated and checked before any runs. */
export function translateOpenAI(actions: unknown[], scaler: Scaler): ComputerAction[] {
  return actions.flatMap((action, i) => translateOne(action, actions.length === 1 ? 'action' : `actions[${i}]`, scaler));
}

function translateOne(value: unknown, where: string, scaler: Scaler): ComputerAction[] {
  const body = objectOf(value, where);
  const type = body.type;
  if (typeof type !== 'string' || !(OPENAI_ACTIONS as readonly string[]).includes(type)) {
    throw new InvalidRequestError(`${where}.type must be one of ${OPENAI_ACTIONS.join(', ')}, got ${JSON.stringify(type)?.slice(0, 40)}`);
  }
  const action = type as OpenAIActionType;
  onlyFields(body, where, ['type', ...FIELDS[action].required], FIELDS[action].optional);
  const at = () => point(body, where, scaler);
  const keys = (): KeyCombo | undefined => (body.keys === undefined ? undefined : vendorKeyList(body.keys, `${where}.keys`));
  switch (action) {
    case 'click':
      return [click(body.button, where, at(), keys())];
    case 'double_click':
      return [withModifier({ action: 'double_click', coordinate: at() }, keys())];
    case 'drag':
      return drag(body.path, `${where}.path`, scaler);
    case 'keypress':
      return [{ action: 'key', combos: [vendorKeyList(body.keys, `${where}.keys`)] }];
    case 'move':
      return [{ action: 'mouse_move', coordinate: at() }];
    case 'scroll':
      return scroll(body, where, at(), keys());
    case 'type':
      return [typedText(body.text, `${where}.text`, scaler)];
    case 'wait':
      return [{ action: 'wait', seconds: WAIT_SECONDS }];
    case 'screenshot':
      return [{ action: 'screenshot' }];
  }
}

/** x and y in the model space, bounds-checked there, on the real screen. */
function point(body: Fields, where: string, scaler: Scaler): Point {
  const x = integer(body.x, `${where}.x`, 0, scaler.model.width - 1);
  const y = integer(body.y, `${where}.y`, 0, scaler.model.height - 1);
  return scaler.toScreen({ x, y });
}

function click(button: unknown, where: string, coordinate: Point, modifier: KeyCombo | undefined): ComputerAction {
  const name = button ?? 'left';
  if (typeof name !== 'string' || !(BUTTONS as readonly string[]).includes(name)) {
    throw new InvalidRequestError(`${where}.button must be one of ${BUTTONS.join(', ')}, got ${JSON.stringify(button)?.slice(0, 40)}`);
  }
  switch (name as (typeof BUTTONS)[number]) {
    case 'left':
      return withModifier({ action: 'left_click', coordinate }, modifier);
    case 'right':
      return withModifier({ action: 'right_click', coordinate }, modifier);
    case 'wheel':
      return withModifier({ action: 'middle_click', coordinate }, modifier);
    case 'back':
      return withModifier({ action: 'button_click', button: 8, coordinate }, modifier);
    case 'forward':
      return withModifier({ action: 'button_click', button: 9, coordinate }, modifier);
  }
}

function withModifier<T extends ComputerAction>(action: T, modifier: KeyCombo | undefined): T {
  return modifier ? { ...action, modifier } : action;
}

/** Press at the first point, move through the others, release at the last. */
function drag(value: unknown, field: string, scaler: Scaler): ComputerAction[] {
  if (!Array.isArray(value) || value.length < 2) throw new InvalidRequestError(`${field} must be an array of at least two points {x, y}`);
  if (value.length > MAX_DRAG_POINTS) throw new InvalidRequestError(`${field} has ${value.length} points; at most ${MAX_DRAG_POINTS}`);
  const points = value.map((p, i) => {
    const where = `${field}[${i}]`;
    const body = objectOf(p, where);
    onlyFields(body, where, ['x', 'y']);
    return point(body, where, scaler);
  });
  const [first, ...rest] = points as [Point, ...Point[]];
  return [
    { action: 'mouse_move', coordinate: first },
    { action: 'left_mouse_down' },
    ...rest.map((coordinate): ComputerAction => ({ action: 'mouse_move', coordinate })),
    { action: 'left_mouse_up' },
  ];
}

/** Pixels to wheel notches: vertical first, then horizontal, at the point, keys held. */
function scroll(body: Fields, where: string, coordinate: Point, modifier: KeyCombo | undefined): ComputerAction[] {
  const limit = MAX_NOTCHES * PIXELS_PER_NOTCH;
  const dx = integer(body.scroll_x, `${where}.scroll_x`, -limit, limit);
  const dy = integer(body.scroll_y, `${where}.scroll_y`, -limit, limit);
  const actions: ComputerAction[] = [{ action: 'mouse_move', coordinate }];
  const wheel = (pixels: number, negative: ScrollDirection, positive: ScrollDirection) => {
    const amount = notches(pixels);
    if (amount > 0) actions.push(withModifier({ action: 'scroll', direction: pixels < 0 ? negative : positive, amount, coordinate }, modifier));
  };
  wheel(dy, 'up', 'down');
  wheel(dx, 'left', 'right');
  return actions;
}

/** At least one notch for any non-zero distance: a model that asks to scroll sees it happen. */
export function notches(pixels: number): number {
  if (pixels === 0) return 0;
  return Math.min(MAX_NOTCHES, Math.max(1, Math.round(Math.abs(pixels) / PIXELS_PER_NOTCH)));
}
