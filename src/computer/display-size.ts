import type { GuestTransport } from '../transport/index.js';
import type { Size } from './scaling.js';

/** The sides a session's screen may have (the API's bounds on a create's width and height). */
export const MIN_SCREEN_SIDE = 320;
export const MAX_SCREEN_SIDE = 3840;

/** xdpyinfo's report of a display: a few KiB (a line per visual and extension); more is not a display's. */
const MAX_XDPYINFO_BYTES = 256 * 1024;

/**
 * The size of an X display as its server reports it (xdpyinfo's `dimensions:` line). For a
 * display the session's own programs start (the `xfce` template: E2B's SDK starts Xvfb at the
 * `resolution` its caller chose, which it never tells the API), the screen is whatever they
 * made. Undefined when the display does not answer or reports a size outside the API's bounds:
 * the session's size then stands, and the grabber refuses frames that do not fit it.
 */
export async function displaySize(connection: GuestTransport, display: number, timeoutMs: number): Promise<Size | undefined> {
  const result = await connection.exec(`DISPLAY=:${display} exec xdpyinfo`, { timeoutMs, maxOutputBytes: MAX_XDPYINFO_BYTES });
  if (result.exitCode !== 0) return undefined;
  const match = /^\s*dimensions:\s+(\d{1,5})x(\d{1,5}) pixels/m.exec(result.stdout.toString('utf8'));
  if (!match) return undefined;
  const size = { width: Number(match[1]), height: Number(match[2]) };
  const fits = (side: number) => side >= MIN_SCREEN_SIDE && side <= MAX_SCREEN_SIDE;
  return fits(size.width) && fits(size.height) ? size : undefined;
}
