import { InvalidRequestError } from '../../errors.js';

/**
 * What a client may ask of the desktop helper (src/guest/files/sbx-desktopd), checked here by
 * shape before anything reaches the guest. Client text is only ever data of a JSON request
 * on the helper's stdin; these checks make sure it is also harmless as the argument the
 * helper passes on (a URL that cannot be read as an option, a desktop-file id that cannot
 * leave the applications directories). The helper checks the same shapes again.
 */
export type DesktopRequest =
  | { verb: 'screen' }
  | { verb: 'windows' }
  | { verb: 'focus'; window: number }
  | { verb: 'close'; window: number }
  | { verb: 'clipboard-get' }
  | { verb: 'clipboard-set'; text: string }
  | { verb: 'open'; target: string }
  | { verb: 'launch'; app: string };

/** Longest `open` target (a URL or a path); PATH_MAX of Linux is 4096. */
export const MAX_TARGET_LENGTH = 4096;
/** Most UTF-8 bytes the clipboard is set to or read from. */
export const MAX_CLIPBOARD_BYTES = 1024 * 1024;
/** X resource ids are 29-bit; anything up to 32 bits is at least a number X can be asked about. */
export const MAX_WINDOW_ID = 0xffff_ffff;
/** URL schemes `open` hands to the guest's default applications. */
export const OPEN_SCHEMES = ['http', 'https', 'file', 'mailto'] as const;

const URL_SHAPE = new RegExp(`^(?:${OPEN_SCHEMES.join('|')}):[\\x21-\\x7e]+$`, 'i');
/** A desktop-file id: no `/`, no space, cannot start with `-` or `.`. */
const APP_ID = /^[A-Za-z0-9][A-Za-z0-9._-]{0,254}$/;
const WINDOW_ID = /^[1-9][0-9]{0,9}$/;
/** With the u flag, a surrogate half matches only when it is not part of a pair. */
const LONE_SURROGATE = /[\uD800-\uDFFF]/u;

/**
 * An `open` target: a URL with an allowed scheme and no whitespace or control character
 * (percent-encode them), or an absolute guest path without NUL or newline. Either way it
 * starts with a letter or `/`, so no program can read it as an option.
 */
export function openTarget(value: unknown, field = 'target'): string {
  if (typeof value !== 'string' || value.length === 0) throw new InvalidRequestError(`${field} must be a URL or an absolute path in the sandbox`);
  if (value.length > MAX_TARGET_LENGTH) throw new InvalidRequestError(`${field} is longer than ${MAX_TARGET_LENGTH} characters`);
  if (value.startsWith('/')) {
    if (/[\0\n\r]/.test(value)) throw new InvalidRequestError(`${field} is a path with a NUL or a line break`);
    if (LONE_SURROGATE.test(value)) throw new InvalidRequestError(`${field} is not well-formed Unicode`);
    return value;
  }
  if (!URL_SHAPE.test(value) || !URL.canParse(value)) {
    throw new InvalidRequestError(
      `${field} must be an absolute path or a URL with scheme ${OPEN_SCHEMES.join(', ')} and no spaces or control characters (percent-encode them)`,
    );
  }
  return value;
}

/** A desktop-file id (`firefox-esr`, `debian-xterm.desktop`), without its `.desktop`. */
export function appId(value: unknown, field = 'app'): string {
  if (typeof value !== 'string' || !APP_ID.test(value) || value.includes('..')) {
    throw new InvalidRequestError(
      `${field} must be a desktop-file id such as "debian-xterm": letters, digits, ".", "_" and "-", starting with a letter or digit`,
    );
  }
  return value.endsWith('.desktop') ? value.slice(0, -'.desktop'.length) : value;
}

/** A window id as the window list gives it (a number; in a path, its decimal digits). */
export function windowId(value: unknown, field = 'windowId'): number {
  const number = typeof value === 'string' && WINDOW_ID.test(value) ? Number(value) : value;
  if (typeof number !== 'number' || !Number.isInteger(number) || number < 1 || number > MAX_WINDOW_ID) {
    throw new InvalidRequestError(`${field} must be a window id from the window list (a positive integer)`);
  }
  return number;
}

/** Clipboard text: a string of at most MAX_CLIPBOARD_BYTES in UTF-8 (a lone surrogate is not text). */
export function clipboardText(value: unknown, field = 'text'): string {
  if (typeof value !== 'string') throw new InvalidRequestError(`${field} must be a string`);
  if (LONE_SURROGATE.test(value)) throw new InvalidRequestError(`${field} is not well-formed Unicode (a lone surrogate)`);
  if (Buffer.byteLength(value, 'utf8') > MAX_CLIPBOARD_BYTES) throw new InvalidRequestError(`${field} is longer than ${MAX_CLIPBOARD_BYTES} bytes of UTF-8`);
  return value;
}
