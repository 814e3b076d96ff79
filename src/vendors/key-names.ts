import { InvalidRequestError } from '../errors.js';
import { keysymName, type KeyCombo } from '../computer/keyboard-keys.js';

/**
 * Other vendors' key names, mapped to X keysym names through the same allow-list as ours
 * (computer/keyboard-keys.ts): nothing but a checked keysym name ever reaches the guest's input
 * helper, whichever vendor's spelling a model used.
 *
 * OpenAI's models send upper-case names ("CTRL", "ENTER", "ARROWLEFT", "C"), Gemini's
 * Playwright-style ones ("Control", "Enter", "ArrowLeft", "c"); keys.ts's aliases already
 * match those case-insensitively. What differs: a single letter is a key, not a character,
 * so "C" in ["CTRL", "C"] means the c key (X's keysym "C" would be read as shift+c).
 */
const VENDOR_ALIASES: Readonly<Record<string, string>> = {
  // Playwright / DOM KeyboardEvent.key names not in keys.ts's aliases.
  controlleft: 'Control_L',
  controlright: 'Control_R',
  shiftleft: 'Shift_L',
  shiftright: 'Shift_R',
  altleft: 'Alt_L',
  altright: 'Alt_R',
  metaleft: 'Super_L',
  metaright: 'Super_R',
  controlormeta: 'Control_L',
  altgraph: 'ISO_Level3_Shift',
  contextmenu: 'Menu',
};

/** At most this many keys in one vendor key list or combo (a chord, not a text). */
export const MAX_VENDOR_KEYS = 10;
const MAX_KEY_NAME_LENGTH = 64;

/** One vendor key name as an X keysym name, or a 400 naming `field`. */
export function vendorKeysym(name: unknown, field: string): string {
  if (typeof name !== 'string' || name === '') throw new InvalidRequestError(`${field} must be a non-empty key name such as "CTRL" or "Enter"`);
  if (name.length > MAX_KEY_NAME_LENGTH) throw new InvalidRequestError(`${field} has a key name longer than ${MAX_KEY_NAME_LENGTH} characters`);
  if (/^[A-Za-z]$/.test(name)) return name.toLowerCase();
  const alias = VENDOR_ALIASES[name.toLowerCase()];
  if (alias) return alias;
  return keysymName(name, field);
}

/** OpenAI's `keys`: an array of key names pressed together. */
export function vendorKeyList(value: unknown, field: string): KeyCombo {
  if (!Array.isArray(value) || value.length === 0) throw new InvalidRequestError(`${field} must be a non-empty array of key names such as ["CTRL", "C"]`);
  if (value.length > MAX_VENDOR_KEYS) throw new InvalidRequestError(`${field} has ${value.length} keys; at most ${MAX_VENDOR_KEYS} pressed together`);
  return value.map((name, i) => vendorKeysym(name, `${field}[${i}]`));
}

/**
 * Gemini's `keys`: one combo as a string ("Control+C", "Enter"), or (newer actions) an
 * array of key names. A lone "+" names the plus key ("Control++").
 */
export function vendorKeyCombo(value: unknown, field: string): KeyCombo {
  if (Array.isArray(value)) return vendorKeyList(value, field);
  if (typeof value !== 'string' || value.trim() === '') throw new InvalidRequestError(`${field} must be a key combination such as "Control+C"`);
  if (value.length > MAX_VENDOR_KEYS * (MAX_KEY_NAME_LENGTH + 1)) throw new InvalidRequestError(`${field} is too long`);
  const trimmed = value.trim();
  if (trimmed === '+') return [vendorKeysym('+', field)];
  const parts = trimmed.endsWith('++') ? [...trimmed.slice(0, -2).split('+'), '+'] : trimmed.split('+');
  if (parts.length > MAX_VENDOR_KEYS) throw new InvalidRequestError(`${field} has ${parts.length} keys; at most ${MAX_VENDOR_KEYS} in one combination`);
  return parts.map((part) => {
    if (part === '') throw new InvalidRequestError(`${field} ${JSON.stringify(value.slice(0, 40))} has an empty key name between "+" signs`);
    return vendorKeysym(part, field);
  });
}
