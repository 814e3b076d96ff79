import { InvalidRequestError } from '../errors.js';
import { KEYSYM_NAMES } from './keysym-names.js';

/**
 * Key names from a client, checked against an allow-list: an X keysym name (keysym-names.ts,
 * generated from X11's headers) or one of the aliases below. Nothing else reaches the guest,
 * where sbx-input presses keysyms by name and has no command language to smuggle into.
 *
 * Models trained on several platforms say "Enter", "cmd", "PageDown" as often as X's
 * "Return", "Super_L", "Page_Down"; both are accepted. Aliases match case-insensitively,
 * keysym names exactly (X tells "a" from "A").
 */
export const ALIASES: Readonly<Record<string, string>> = {
  enter: 'Return',
  return: 'Return',
  esc: 'Escape',
  escape: 'Escape',
  cmd: 'Super_L',
  command: 'Super_L',
  win: 'Super_L',
  windows: 'Super_L',
  meta: 'Super_L',
  super: 'Super_L',
  super_l: 'Super_L',
  super_r: 'Super_R',
  ctrl: 'Control_L',
  control: 'Control_L',
  control_l: 'Control_L',
  control_r: 'Control_R',
  alt: 'Alt_L',
  option: 'Alt_L',
  opt: 'Alt_L',
  alt_l: 'Alt_L',
  alt_r: 'Alt_R',
  shift: 'Shift_L',
  shift_l: 'Shift_L',
  shift_r: 'Shift_R',
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
  $: 'dollar',
  '%': 'percent',
  '^': 'asciicircum',
  '&': 'ampersand',
  '(': 'parenleft',
  ')': 'parenright',
  _: 'underscore',
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

/** One key combo ("ctrl+shift+t"): X keysym names, pressed in order, released in reverse. */
export type KeyCombo = readonly string[];

const KEY_NAME_SHAPE = /^[A-Za-z0-9_]{1,64}$/;
const MAX_COMBOS = 50;
const MAX_KEYS_PER_COMBO = 10;

/** One key name as an X keysym name, or a 400 naming the field. */
export function keysymName(name: string, field: string): string {
  const alias = ALIASES[name.toLowerCase()];
  if (alias) return alias;
  const fkey = /^f([1-9]|1[0-9]|2[0-4])$/i.exec(name);
  if (fkey) return `F${fkey[1]}`;
  if (name.length === 1 && PUNCTUATION[name]) return PUNCTUATION[name];
  if (!KEY_NAME_SHAPE.test(name)) {
    throw new InvalidRequestError(
      `${field} has an invalid key name ${JSON.stringify(name.slice(0, 40))}: use names such as Return, ctrl, alt, shift, super, Page_Down, F5, a`,
    );
  }
  if (KEYSYM_NAMES.has(name)) return name;
  throw new InvalidRequestError(
    `${field} has an unknown key name ${JSON.stringify(name)}: use X keysym names such as Return, Page_Down, F5, a, or ctrl, alt, shift, super`,
  );
}

/** A key combo ("ctrl+shift+t", "ctrl++") as keysym names. */
export function keyCombo(combo: string, field: string): KeyCombo {
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
  if (names.length > MAX_KEYS_PER_COMBO) {
    throw new InvalidRequestError(`${field} ${JSON.stringify(combo.slice(0, 40))} has ${names.length} keys; at most ${MAX_KEYS_PER_COMBO} in one combo`);
  }
  return names;
}

/**
 * The `text` of the key action: one combo, or several separated by spaces
 * ("ctrl+a Delete"), pressed one after the other.
 */
export function parseKeySequence(value: unknown, field: string): KeyCombo[] {
  if (typeof value !== 'string' || value.trim() === '') throw new InvalidRequestError(`${field} must be a non-empty string`);
  if (value.length > 1_000) throw new InvalidRequestError(`${field} is too long (${value.length} characters; at most 1000)`);
  const combos = value.trim().split(/\s+/);
  if (combos.length > MAX_COMBOS) throw new InvalidRequestError(`${field} has ${combos.length} key combos; at most ${MAX_COMBOS}`);
  return combos.map((combo) => keyCombo(combo, field));
}
