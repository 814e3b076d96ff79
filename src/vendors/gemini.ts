import type { ComputerAction, ScrollDirection } from '../computer/actions.js';
import type { Point, Scaler, Size } from '../computer/scaling.js';
import { openTarget } from '../computer/desktop-actions/requests.js';
import { InvalidRequestError } from '../errors.js';
import { boolean, ignoredText, integer, objectOf, onlyFields, typedText, type Fields } from './fields.js';
import { vendorKeyCombo } from './key-names.js';
import { notches } from './openai.js';

/**
 * Gemini computer-use function calls as our own action list (computer/actions.ts), run by
 * the same code as /actions. Gemini points on a 1000x1000 grid (0-999) whatever the
 * screenshot's size, so grid points map straight onto the real screen: scaling changes the
 * screenshots it sees, never where its clicks land.
 *
 * Browser-only calls (navigate, search, open_web_browser, go_back, go_forward) need the
 * desktop's browser: the route does their browser step (desktop-actions) before the input.
 */
export const GEMINI_GRID = 1000;
/** scroll_at's default, in grid units of the scrolled axis (Gemini's reference). */
const DEFAULT_MAGNITUDE = 800;
/** Where `search` starts, as in Gemini's reference: the search engine's home page. */
export const SEARCH_HOME = 'https://www.google.com/';
const MAX_NAME_LENGTH = 64;

/**
 * What the browser must do first. `open`: in the browser's window when one is open (the
 * current tab, as Gemini's reference navigates), else started on it by the desktop's `open`.
 */
export type BrowserStep = { kind: 'launch' } | { kind: 'open'; target: string } | { kind: 'window' };

export interface GeminiPlan {
  name: string;
  /** What the browser must do (or be there for) before the input runs. */
  browser?: BrowserStep;
  /** The input, in screen pixels; the last takes the screenshot that answers. */
  actions: ComputerAction[];
  /** The URL a navigation went to, for the FunctionResponse's `url`. */
  url?: string;
}

type Translate = (args: Fields, scaler: Scaler) => Omit<GeminiPlan, 'name'>;

const DIRECTIONS = ['up', 'down', 'left', 'right'] as const;

/** name -> [required args, optional args, translation]. */
const CALLS: Record<string, [string[], string[], Translate]> = {
  open_web_browser: [[], [], () => ({ browser: { kind: 'launch' }, actions: [settle()] })],
  wait_5_seconds: [[], [], () => ({ actions: [{ action: 'wait', seconds: 5 }] })],
  go_back: [[], [], () => ({ browser: { kind: 'window' }, actions: [keys('alt+Left')] })],
  go_forward: [[], [], () => ({ browser: { kind: 'window' }, actions: [keys('alt+Right')] })],
  search: [[], [], () => ({ browser: { kind: 'open', target: SEARCH_HOME }, actions: [settle()], url: SEARCH_HOME })],
  navigate: [['url'], [], (a) => navigate(a.url)],
  click_at: [['x', 'y'], [], (a, s) => ({ actions: [{ action: 'left_click', coordinate: gridPoint(a, s.screen) }] })],
  click: [['x', 'y'], [], (a, s) => ({ actions: [{ action: 'left_click', coordinate: gridPoint(a, s.screen) }] })],
  double_click: [['x', 'y'], [], (a, s) => ({ actions: [{ action: 'double_click', coordinate: gridPoint(a, s.screen) }] })],
  right_click: [['x', 'y'], [], (a, s) => ({ actions: [{ action: 'right_click', coordinate: gridPoint(a, s.screen) }] })],
  hover_at: [['x', 'y'], [], (a, s) => ({ actions: [{ action: 'mouse_move', coordinate: gridPoint(a, s.screen) }] })],
  type_text_at: [['x', 'y', 'text'], ['press_enter', 'clear_before_typing'], typeTextAt],
  key_combination: [['keys'], [], (a) => ({ actions: [{ action: 'key', combos: [vendorKeyCombo(a.keys, 'args.keys')] }] })],
  hotkey: [['keys'], [], (a) => ({ actions: [{ action: 'key', combos: [vendorKeyCombo(a.keys, 'args.keys')] }] })],
  scroll_document: [['direction'], [], (a, s) => scrollDocument(direction(a.direction), s.screen)],
  scroll_at: [['x', 'y', 'direction'], ['magnitude'], scrollAt],
  drag_and_drop: [['x', 'y', 'destination_x', 'destination_y'], [], dragAndDrop],
};
/** Fields any call may carry for the model's own sake (the newer actions' intent, a safety decision the client has confirmed). */
const IGNORED_ARGS = ['intent', 'safety_decision'];

export const GEMINI_CALLS = Object.keys(CALLS);

/** A FunctionCall ({name, args, id?}) as a plan, checked before anything runs. */
export function translateGemini(call: Fields, scaler: Scaler): GeminiPlan {
  const name = call.name;
  if (typeof name !== 'string' || name.length > MAX_NAME_LENGTH) throw new InvalidRequestError("name must be the function call's name, a string");
  const entry = CALLS[name];
  if (!entry) throw new InvalidRequestError(`name "${name}" is not a computer-use function; expected one of ${GEMINI_CALLS.join(', ')}`);
  const args = call.args === undefined ? {} : objectOf(call.args, 'args');
  const [required, optional, translate] = entry;
  onlyFields(args, 'args', required, [...optional, ...IGNORED_ARGS]);
  for (const field of IGNORED_ARGS) ignoredText(args[field], `args.${field}`);
  return { name, ...translate(args, scaler) };
}

/** A grid coordinate (0-999) on a screen of `size` pixels: its cell's position, rounded, kept on screen. */
export function gridToScreen(value: number, size: number): number {
  return Math.min(size - 1, Math.round((value * size) / GEMINI_GRID));
}

function gridPoint(args: Fields, screen: Size, xField = 'x', yField = 'y'): Point {
  const x = integer(args[xField], `args.${xField}`, 0, GEMINI_GRID - 1);
  const y = integer(args[yField], `args.${yField}`, 0, GEMINI_GRID - 1);
  return { x: gridToScreen(x, screen.width), y: gridToScreen(y, screen.height) };
}

function keys(combo: string): ComputerAction {
  return { action: 'key', combos: [vendorKeyCombo(combo, 'keys')] };
}

/** How long the address bar gets to take the focus before the URL is typed. */
const ADDRESS_BAR_FOCUS_SECONDS = 0.5;

/**
 * Navigating the focused browser window's current tab: its address bar (ctrl+L), a pause, the
 * URL typed as text (already checked by openTarget: no spaces or control characters), Enter.
 * The pause: while a page has the focus, Firefox hands keys to the page's process first and
 * focuses the bar only when ctrl+L comes back unused, so keys typed at once lose their first
 * characters to the page (seen on a loaded host: "Server Not Found" for a mangled host).
 */
export function addressBarActions(target: string): ComputerAction[] {
  return [keys('Control+l'), { action: 'wait', seconds: ADDRESS_BAR_FOCUS_SECONDS }, { action: 'type', text: target }, keys('Enter')];
}

/** Nothing to press: the settled screen after the browser's step is the answer. */
function settle(): ComputerAction {
  return { action: 'wait', seconds: 0 };
}

function navigate(value: unknown): Omit<GeminiPlan, 'name'> {
  if (typeof value !== 'string') throw new InvalidRequestError('args.url must be a string');
  // Gemini's reference lets a bare host through as https ("example.com").
  const url = /^[a-z][a-z0-9+.-]*:/i.test(value) || value.startsWith('/') ? value : `https://${value}`;
  const target = openTarget(url, 'args.url');
  return { browser: { kind: 'open', target }, actions: [settle()], url: target };
}

/** Click, optionally select all and delete, type, optionally Enter (Gemini's defaults: both on). */
function typeTextAt(args: Fields, scaler: Scaler): Omit<GeminiPlan, 'name'> {
  const coordinate = gridPoint(args, scaler.screen);
  const typed = typedText(args.text, 'args.text', scaler);
  const clear = boolean(args.clear_before_typing, 'args.clear_before_typing', true);
  const enter = boolean(args.press_enter, 'args.press_enter', true);
  return {
    actions: [{ action: 'left_click', coordinate }, ...(clear ? [keys('Control+a'), keys('Delete')] : []), typed, ...(enter ? [keys('Enter')] : [])],
  };
}

function direction(value: unknown): ScrollDirection {
  if (typeof value !== 'string' || !(DIRECTIONS as readonly string[]).includes(value)) {
    throw new InvalidRequestError(`args.direction must be one of ${DIRECTIONS.join(', ')}, got ${JSON.stringify(value)?.slice(0, 40)}`);
  }
  return value as ScrollDirection;
}

/** The whole page, as the reference does: Page Up/Down vertically; sideways, the wheel at the centre. */
function scrollDirection(dir: ScrollDirection, screen: Size): ComputerAction {
  if (dir === 'up') return keys('PageUp');
  if (dir === 'down') return keys('PageDown');
  const centre = { x: Math.floor(screen.width / 2), y: Math.floor(screen.height / 2) };
  return { action: 'scroll', direction: dir, amount: notches(screen.width / 2), coordinate: centre };
}

function scrollDocument(dir: ScrollDirection, screen: Size): Omit<GeminiPlan, 'name'> {
  return { actions: [scrollDirection(dir, screen)] };
}

/** magnitude is in grid units along the scrolled axis: pixels of the real screen, then wheel notches. */
function scrollAt(args: Fields, scaler: Scaler): Omit<GeminiPlan, 'name'> {
  const coordinate = gridPoint(args, scaler.screen);
  const dir = direction(args.direction);
  const magnitude = args.magnitude === undefined ? DEFAULT_MAGNITUDE : integer(args.magnitude, 'args.magnitude', 0, GEMINI_GRID - 1);
  const axis = dir === 'up' || dir === 'down' ? scaler.screen.height : scaler.screen.width;
  const amount = notches((magnitude * axis) / GEMINI_GRID);
  return { actions: [{ action: 'mouse_move', coordinate }, ...(amount > 0 ? [{ action: 'scroll', direction: dir, amount, coordinate } as const] : [])] };
}

function dragAndDrop(args: Fields, scaler: Scaler): Omit<GeminiPlan, 'name'> {
  const start = gridPoint(args, scaler.screen);
  const coordinate = gridPoint(args, scaler.screen, 'destination_x', 'destination_y');
  return { actions: [{ action: 'left_click_drag', start, coordinate }] };
}
