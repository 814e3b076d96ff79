import type { ClickAction, ComputerAction, ScrollDirection } from './actions.js';
import type { KeyCombo } from './keyboard-keys.js';
import type { Point } from './scaling.js';

/**
 * Pointer and key actions as requests to the guest's input helper (src/guest/files/sbx-input),
 * which has a closed set of verbs and no command language: a key name is only ever the
 * keysym argument of one `key` request. Semantics follow the reference implementation:
 * modifiers are held around a click or scroll, combos are pressed in order and released in
 * reverse, and a click is a press and a release with no pause (xdotool's click sleeps).
 */
export type InputRequest =
  | { verb: 'move'; x: number; y: number }
  | { verb: 'button'; button: number; down: boolean }
  /** `field` is the client field the key name came from, to name it in an error. */
  | { verb: 'key'; keysym: string; down: boolean; field: string }
  | { verb: 'where' };

/** What to send for one action: requests, and for hold_key a wait and the releases. */
export interface InputPlan {
  requests: InputRequest[];
  hold?: { ms: number; release: InputRequest[] };
}

const BUTTON: Record<ClickAction, number> = {
  left_click: 1,
  right_click: 3,
  middle_click: 2,
  double_click: 1,
  triple_click: 1,
};
const CLICKS: Record<ClickAction, number> = { left_click: 1, right_click: 1, middle_click: 1, double_click: 2, triple_click: 3 };
const WHEEL: Record<ScrollDirection, number> = { up: 4, down: 5, left: 6, right: 7 };

export type PointerAction = Exclude<ComputerAction, { action: 'screenshot' | 'cursor_position' | 'type' | 'wait' | 'zoom' }>;

export function isPointerOrKeyAction(action: ComputerAction): action is PointerAction {
  return !['screenshot', 'cursor_position', 'type', 'wait', 'zoom'].includes(action.action);
}

/** The requests of one action (an empty list when there is nothing to do). */
export function inputPlan(action: PointerAction): InputPlan {
  switch (action.action) {
    case 'mouse_move':
      return { requests: moveTo(action.coordinate) };
    case 'left_click':
    case 'right_click':
    case 'middle_click':
    case 'double_click':
    case 'triple_click': {
      // Repeated within microseconds: well inside any double-click interval.
      const clicks = repeat(CLICKS[action.action], click(BUTTON[action.action]));
      return { requests: [...moveTo(action.coordinate), ...holding(action.modifier, 'key', clicks)] };
    }
    case 'button_click':
      return { requests: [...moveTo(action.coordinate), ...holding(action.modifier, 'keys', click(action.button))] };
    case 'left_click_drag':
      return {
        requests: [...moveTo(action.start), button(1, true), ...moveTo(action.coordinate), button(1, false)],
      };
    case 'left_mouse_down':
      return { requests: [button(1, true)] };
    case 'left_mouse_up':
      return { requests: [button(1, false)] };
    case 'scroll': {
      const wheel = repeat(action.amount, click(WHEEL[action.direction]));
      return { requests: [...moveTo(action.coordinate), ...(wheel.length ? holding(action.modifier, 'text', wheel) : [])] };
    }
    case 'key':
      return { requests: action.combos.flatMap((combo) => [...press(combo, 'text'), ...release(combo, 'text')]) };
    case 'hold_key':
      return { requests: press(action.key, 'text'), hold: { ms: action.seconds * 1000, release: release(action.key, 'text') } };
  }
}

/** The pointer position. */
export const WHERE: InputRequest = { verb: 'where' };

function moveTo(point: Point | undefined): InputRequest[] {
  return point ? [{ verb: 'move', x: point.x, y: point.y }] : [];
}

function button(number: number, down: boolean): InputRequest {
  return { verb: 'button', button: number, down };
}

function click(number: number): InputRequest[] {
  return [button(number, true), button(number, false)];
}

function repeat(times: number, requests: InputRequest[]): InputRequest[] {
  return Array.from({ length: times }, () => requests).flat();
}

function press(combo: KeyCombo, field: string): InputRequest[] {
  return combo.map((keysym) => ({ verb: 'key', keysym, down: true, field }));
}

function release(combo: KeyCombo, field: string): InputRequest[] {
  return [...combo].reverse().map((keysym) => ({ verb: 'key', keysym, down: false, field }));
}

function holding(modifier: KeyCombo | undefined, field: string, requests: InputRequest[]): InputRequest[] {
  return modifier ? [...press(modifier, field), ...requests, ...release(modifier, field)] : requests;
}
