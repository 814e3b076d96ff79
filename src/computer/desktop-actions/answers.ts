import { GuestProtocolError, OrchestratorError } from '../../errors.js';
import { DesktopError } from '../desktop.js';
import { MAX_CLIPBOARD_BYTES, MAX_WINDOW_ID, type DesktopRequest } from './requests.js';

/**
 * The desktop helper's answers, read as hostile: the bytes are capped before they are
 * buffered (maxAnswerBytes, checked against the frame's announced length by the desktop
 * channel, or enforced by the SSH exec of an older image's one-shot helper), then every field is checked for its
 * type and range before anything of it reaches a client. An answer that is not what the
 * protocol allows is a 502 naming the guest, never a crash.
 */

/** One top-level window, as the window manager lists it. */
export interface DesktopWindow {
  /** The X window id: what focus and close take. */
  id: number;
  title: string;
  /** WM_CLASS's class (`XTerm`) and instance (`xterm`). */
  app: string;
  instance: string;
  /** The window's content on the screen, in screen pixels. */
  x: number;
  y: number;
  width: number;
  height: number;
  focused: boolean;
}

export interface ScreenSize {
  width: number;
  height: number;
}

/** Most windows listed, longest title, longest class (the helper cuts them there too). */
export const MAX_WINDOWS = 128;
export const MAX_TITLE_LENGTH = 256;
export const MAX_CLASS_LENGTH = 64;
const MAX_SIDE = 65_535;
const MIN_POSITION = -65_535;

/** A window the client named is not (or no longer) on the screen. */
export class WindowNotFoundError extends OrchestratorError {
  constructor(message: string) {
    super('window_not_found', message);
  }
}

/** No desktop file by that id in the guest's applications directories. */
export class AppNotFoundError extends OrchestratorError {
  constructor(message: string) {
    super('app_not_found', message);
  }
}

/** The guest's clipboard holds more than MAX_CLIPBOARD_BYTES; nothing was read. */
export class ClipboardTooLargeError extends OrchestratorError {
  constructor(message: string) {
    super('clipboard_too_large', message);
  }
}

/** `open` or `launch` ran and failed in the guest (no application for that type, no such file). */
export class DesktopActionFailedError extends OrchestratorError {
  constructor(message: string) {
    super('desktop_action_failed', message);
  }
}

/**
 * The JSON line of an answer. The longest is a window list: MAX_WINDOWS entries of a title
 * and two classes of at most 4 UTF-8 bytes a character, and a few numbers (about 200 KiB).
 */
const MAX_JSON_BYTES = 256 * 1024;
/** A clipboard read is a short JSON line, then the text's bytes as they are. */
const MAX_HEADER_BYTES = 4096;

/**
 * Bytes of answer kept, per request: a longer frame is refused at its header (every byte the
 * guest sends costs the host its decryption, so the caps are as tight as the answers).
 */
export function maxAnswerBytes(request: DesktopRequest): number {
  return request.verb === 'clipboard-get' ? MAX_HEADER_BYTES + MAX_CLIPBOARD_BYTES : MAX_JSON_BYTES;
}

type Fields = Record<string, unknown>;

/**
 * The fields of an `ok` answer; a refusal becomes the error it stands for. A clipboard read
 * answers `{"ok": true, "bytes": N}`, a newline and N bytes of text: its fields get `text`.
 */
export function parseAnswer(stdout: Buffer, request: DesktopRequest): Fields {
  const newline = stdout.indexOf(0x0a);
  if (newline < 0) throw broken('an answer without its end of line');
  let answer: unknown;
  try {
    answer = JSON.parse(stdout.subarray(0, newline).toString('utf8'));
  } catch {
    throw broken(`an answer that is not JSON: ${JSON.stringify(stdout.subarray(0, 80).toString('utf8'))}`);
  }
  if (!isObject(answer)) throw broken('an answer that is not an object');
  const rest = stdout.subarray(newline + 1);
  if (answer.ok === true && request.verb === 'clipboard-get') {
    if (answer.bytes !== rest.length) throw broken(`${rest.length} bytes of clipboard text where it announced ${String(answer.bytes).slice(0, 20)}`);
    // Not UTF-8 (another client's clipboard may hold anything): U+FFFD for what is not.
    return { ...answer, text: rest.toString('utf8') };
  }
  if (rest.length > 0) throw broken('more than one line of answer');
  if (answer.ok === true) return answer;
  const message = guestText(answer.message, 500);
  switch (answer.error) {
    case 'no_such_window':
      throw new WindowNotFoundError(`no window ${'window' in request ? request.window : ''} on the screen (list them with GET .../desktop/windows)`);
    case 'no_such_app':
      throw new AppNotFoundError(message || 'no such application in the sandbox');
    case 'clipboard_too_large':
      throw new ClipboardTooLargeError(`the sandbox's clipboard holds more than ${MAX_CLIPBOARD_BYTES} bytes; nothing was read`);
    case 'failed':
      if (request.verb === 'open' || request.verb === 'launch') throw new DesktopActionFailedError(message || `${request.verb} failed in the sandbox`);
      throw new DesktopError(`the desktop helper failed in the guest: ${message}`);
    case 'bad_request':
      // The host checked the request first: a refusal means host and guest disagree.
      throw new DesktopError(`the desktop helper refused the request: ${message}`);
    default:
      throw broken('an answer that is neither ok nor a known error');
  }
}

export function parseWindows(fields: Fields): DesktopWindow[] {
  const list = fields.windows;
  if (!Array.isArray(list) || list.length > MAX_WINDOWS) throw broken(`a window list that is not a list of at most ${MAX_WINDOWS}`);
  return list.map((item: unknown) => {
    if (!isObject(item)) throw broken('a window that is not an object');
    return {
      id: integer(item.id, 1, MAX_WINDOW_ID, 'id'),
      title: string(item.title, MAX_TITLE_LENGTH, 'title'),
      app: string(item.app, MAX_CLASS_LENGTH, 'app'),
      instance: string(item.instance, MAX_CLASS_LENGTH, 'instance'),
      x: integer(item.x, MIN_POSITION, MAX_SIDE, 'x'),
      y: integer(item.y, MIN_POSITION, MAX_SIDE, 'y'),
      width: integer(item.width, 0, MAX_SIDE, 'width'),
      height: integer(item.height, 0, MAX_SIDE, 'height'),
      focused: boolean(item.focused, 'focused'),
    };
  });
}

export function parseScreen(fields: Fields): ScreenSize {
  return { width: integer(fields.width, 1, MAX_SIDE, 'width'), height: integer(fields.height, 1, MAX_SIDE, 'height') };
}

export function parseClipboard(fields: Fields): string {
  const text = fields.text;
  if (typeof text !== 'string' || Buffer.byteLength(text, 'utf8') > MAX_CLIPBOARD_BYTES) throw broken('clipboard text that is not a string within the cap');
  return text;
}

export function parseFlag(fields: Fields, name: 'focused' | 'closed'): boolean {
  return boolean(fields[name], name);
}

export function parseDesktopFile(fields: Fields): string {
  const file = string(fields.file, 4096, 'file');
  if (!file.startsWith('/')) throw broken('a desktop file that is not an absolute path');
  return file;
}

function isObject(value: unknown): value is Fields {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

function integer(value: unknown, min: number, max: number, name: string): number {
  if (typeof value !== 'number' || !Number.isInteger(value) || value < min || value > max) throw broken(`${name} that is not an integer in [${min}, ${max}]`);
  return value;
}

function string(value: unknown, maxLength: number, name: string): string {
  if (typeof value !== 'string' || value.length > maxLength) throw broken(`${name} that is not a string of at most ${maxLength} characters`);
  return value;
}

function boolean(value: unknown, name: string): boolean {
  if (typeof value !== 'boolean') throw broken(`${name} that is not true or false`);
  return value;
}

/** Guest text for an error message: printable, cut short. */
function guestText(value: unknown, maxLength: number): string {
  return typeof value === 'string' ? value.replace(/[\p{Cc}\p{Cf}]/gu, ' ').slice(0, maxLength) : '';
}

/** An answer the protocol does not allow: the guest's fault (a 502, counted as a protocol error). */
function broken(what: string): GuestProtocolError {
  return new GuestProtocolError('desktop', 'desktop_answer', `the desktop helper in the guest sent ${what}`);
}
