/**
 * Buffers for the PNG rows of a piece while it is deflated (banded-png.ts), reused rather than
 * allocated per screenshot: many large short-lived buffers make V8 run mark-compacts, a
 * measurable share of the orchestrator's CPU and event-loop delay. Shared by every session;
 * at most KEPT_BUFFERS of PIECE_BYTES each stay allocated (2 MiB), a larger piece gets a buffer
 * of its own.
 */

/** The largest piece of rows deflated in one call (~160 rows at 1024 pixels wide). */
export const PIECE_BYTES = 512 * 1024;
const KEPT_BUFFERS = 4;

const free: ArrayBuffer[] = [];

/** A buffer of `bytes` bytes (contents undefined), to be handed back with giveRows once unused. */
export function takeRows(bytes: number): Buffer {
  if (bytes > PIECE_BYTES) return Buffer.allocUnsafeSlow(bytes);
  return Buffer.from(free.pop() ?? Buffer.allocUnsafeSlow(PIECE_BYTES).buffer, 0, bytes);
}

/** Hands back a buffer of takeRows; nothing may use it afterwards. */
export function giveRows(rows: Buffer): void {
  if (rows.buffer.byteLength === PIECE_BYTES && free.length < KEPT_BUFFERS && !free.includes(rows.buffer as ArrayBuffer)) free.push(rows.buffer as ArrayBuffer);
}
