import type { ClickAction, ComputerAction, ScrollDirection } from './actions.js';

/**
 * Each pointer and key action as one xdotool argument vector (xdotool chains commands in a
 * single run, so an action is one process and one round trip). Mirrors the reference
 * implementation's semantics; every argument is a validated keysym name or a number.
 */
const BUTTON: Record<ClickAction, string> = {
  left_click: '1',
  right_click: '3',
  middle_click: '2',
  double_click: '1',
  triple_click: '1',
};
const REPEAT: Partial<Record<ClickAction, string>> = { double_click: '2', triple_click: '3' };
const WHEEL: Record<ScrollDirection, string> = { up: '4', down: '5', left: '6', right: '7' };

type PointerAction = Exclude<ComputerAction, { action: 'screenshot' | 'cursor_position' | 'type' | 'wait' | 'zoom' }>;

export function isPointerOrKeyAction(action: ComputerAction): action is PointerAction {
  return !['screenshot', 'cursor_position', 'type', 'wait', 'zoom'].includes(action.action);
}

/** The xdotool arguments, or an empty list when there is nothing to do (scroll by 0). */
export function xdotoolArgs(action: PointerAction): string[] {
  switch (action.action) {
    case 'mouse_move':
      // No --sync: xdotool waits forever when the pointer is already at the target. The
      // X server applies requests in order, so the next command sees the new position.
      return ['mousemove', String(action.coordinate.x), String(action.coordinate.y)];
    case 'left_click':
    case 'right_click':
    case 'middle_click':
    case 'double_click':
    case 'triple_click': {
      const repeat = REPEAT[action.action];
      const click = ['click', ...(repeat ? ['--repeat', repeat, '--delay', '10'] : []), BUTTON[action.action]];
      return [...moveTo(action.coordinate), ...holding(action.modifier, click)];
    }
    case 'left_click_drag':
      return [
        ...moveTo(action.start),
        'mousedown', '1',
        'mousemove', String(action.coordinate.x), String(action.coordinate.y),
        'mouseup', '1',
      ];
    case 'left_mouse_down':
      return ['mousedown', '1'];
    case 'left_mouse_up':
      return ['mouseup', '1'];
    case 'scroll': {
      if (action.amount === 0) return moveTo(action.coordinate);
      const wheel = ['click', '--repeat', String(action.amount), '--delay', '10', WHEEL[action.direction]];
      return [...moveTo(action.coordinate), ...holding(action.modifier, wheel)];
    }
    case 'key':
      return ['key', '--', ...action.combos];
    case 'hold_key':
      return ['keydown', action.key, 'sleep', String(action.seconds), 'keyup', action.key];
  }
}

function moveTo(point: { x: number; y: number } | undefined): string[] {
  return point ? ['mousemove', String(point.x), String(point.y)] : [];
}

function holding(modifier: string | undefined, args: string[]): string[] {
  return modifier ? ['keydown', modifier, ...args, 'keyup', modifier] : args;
}
