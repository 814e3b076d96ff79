import { InvalidRequestError } from '../errors.js';

/**
 * Key names as models write them, mapped to the X keysym names xdotool understands. Models
 * trained on several platforms say "Enter", "cmd", "PageDown" as often as xdotool's
 * "Return", "super", "Page_Down"; both are accepted. Matching is case-insensitive here.
 */
const ALIASES: Record<string, string> = {
  enter: 'Return',
  return: 'Return',
  esc: 'Escape',
  escape: 'Escape',
  cmd: 'super',
  command: 'super',
  win: 'super',
  windows: 'super',
  meta: 'super',
  super: 'super',
  super_l: 'Super_L',
  ctrl: 'ctrl',
  control: 'ctrl',
  control_l: 'Control_L',
  control_r: 'Control_R',
  alt: 'alt',
  option: 'alt',
  opt: 'alt',
  shift: 'shift',
  backspace: 'BackSpace',
  delete: 'Delete',
  del: 'Delete',
  insert: 'Insert',
  ins: 'Insert',
  tab: 'Tab',
  space: 'space',
  spacebar: 'space',
  pageup: 'Page_Up',
  page_up: 'Page_Up',
  pgup: 'Page_Up',
  prior: 'Prior',
  pagedown: 'Page_Down',
  page_down: 'Page_Down',
  pgdn: 'Page_Down',
  next: 'Next',
  home: 'Home',
  end: 'End',
  up: 'Up',
  down: 'Down',
  left: 'Left',
  right: 'Right',
  arrowup: 'Up',
  arrowdown: 'Down',
  arrowleft: 'Left',
  arrowright: 'Right',
  capslock: 'Caps_Lock',
  caps_lock: 'Caps_Lock',
  numlock: 'Num_Lock',
  num_lock: 'Num_Lock',
  printscreen: 'Print',
  print: 'Print',
  prtsc: 'Print',
  menu: 'Menu',
  pause: 'Pause',
  break: 'Break',
  scrolllock: 'Scroll_Lock',
  scroll_lock: 'Scroll_Lock',
};

/** Printable characters a model may name by themselves, e.g. "ctrl+-", "ctrl+/". */
const PUNCTUATION: Record<string, string> = {
  '-': 'minus',
  '=': 'equal',
  '+': 'plus',
  '/': 'slash',
  '\\': 'backslash',
  '.': 'period',
  ',': 'comma',
  ';': 'semicolon',
  "'": 'apostrophe',
  '`': 'grave',
  '[': 'bracketleft',
  ']': 'bracketright',
  '*': 'asterisk',
  '!': 'exclam',
  '@': 'at',
  '#': 'numbersign',
  '$': 'dollar',
  '%': 'percent',
  '^': 'asciicircum',
  '&': 'ampersand',
  '(': 'parenleft',
  ')': 'parenright',
  '_': 'underscore',
  '?': 'question',
  ':': 'colon',
  '"': 'quotedbl',
  '<': 'less',
  '>': 'greater',
  '{': 'braceleft',
  '}': 'braceright',
  '|': 'bar',
  '~': 'asciitilde',
};

const KEYSYM_NAME = /^[A-Za-z0-9_]{1,64}$/;
const MAX_COMBOS = 50;

/** One key name as xdotool wants it. Unknown names pass through if they look like keysyms. */
export function keysymName(name: string, field: string): string {
  const alias = ALIASES[name.toLowerCase()];
  if (alias) return alias;
  const fkey = /^f([1-9]|1[0-9]|2[0-4])$/i.exec(name);
  if (fkey) return `F${fkey[1]}`;
  if (name.length === 1 && PUNCTUATION[name]) return PUNCTUATION[name] as string;
  if (KEYSYM_NAME.test(name)) return name;
  throw new InvalidRequestError(
    `${field} has an invalid key name ${JSON.stringify(name.slice(0, 40))}: use names such as Return, ctrl, alt, shift, super, Page_Down, F5, a`,
  );
}

/**
 * A key combo ("ctrl+shift+t", "ctrl++") as xdotool argument, keysym names joined by "+".
 */
export function keyCombo(combo: string, field: string): string {
  // "ctrl++" means ctrl and the + key: a trailing empty part after splitting is the plus key.
  const parts = combo.split('+');
  const names: string[] = [];
  for (let i = 0; i < parts.length; i++) {
    const part = parts[i] as string;
    if (part === '') {
      if (i === parts.length - 1 && i > 0 && parts[i - 1] === '') {
        names.push('plus');
        continue;
      }
      if (i === parts.length - 2 && parts[i + 1] === '') continue;
      throw new InvalidRequestError(`${field} ${JSON.stringify(combo.slice(0, 40))} has an empty key name between "+" signs`);
    }
    names.push(keysymName(part, field));
  }
  return names.join('+');
}

/**
 * The `text` of the key action: one combo, or several separated by spaces
 * ("ctrl+a Delete"), pressed one after the other as xdotool does.
 */
export function parseKeySequence(value: unknown, field: string): string[] {
  if (typeof value !== 'string' || value.trim() === '') throw new InvalidRequestError(`${field} must be a non-empty string`);
  if (value.length > 1_000) throw new InvalidRequestError(`${field} is too long (${value.length} characters; at most 1000)`);
  const combos = value.trim().split(/\s+/);
  if (combos.length > MAX_COMBOS) throw new InvalidRequestError(`${field} has ${combos.length} key combos; at most ${MAX_COMBOS}`);
  return combos.map((combo) => keyCombo(combo, field));
}
