/**
 * Adler-32, the checksum that ends a zlib stream (RFC 1950), for PNGs whose rows are deflated
 * in bands (banded-png.ts): each band's checksum is computed while its rows are written (rgb-rows.ts)
 * and the stream's is combined from them, as zlib's adler32_combine does, without reading the
 * rows again. Node's zlib offers no Adler-32 of its own.
 */

/** The largest prime below 2^16: both sums are kept modulo it. */
export const ADLER_BASE = 65521;

/** The Adler-32 of no bytes. */
export const ADLER_EMPTY = 1;

/**
 * The Adler-32 of A followed by B, from A's (`first`), B's (`second`) and B's length: zlib's
 * adler32_combine. The sums stay below 2^33 (safe in JavaScript numbers) and are reduced
 * before any bitwise operation.
 */
export function adler32Combine(first: number, second: number, secondLength: number): number {
  const rem = secondLength % ADLER_BASE;
  let sum1 = first & 0xffff;
  let sum2 = (rem * sum1) % ADLER_BASE;
  sum1 += (second & 0xffff) + ADLER_BASE - 1;
  sum2 += (first >>> 16) + (second >>> 16) + ADLER_BASE - rem;
  if (sum1 >= ADLER_BASE) sum1 -= ADLER_BASE;
  if (sum1 >= ADLER_BASE) sum1 -= ADLER_BASE;
  if (sum2 >= 2 * ADLER_BASE) sum2 -= 2 * ADLER_BASE;
  if (sum2 >= ADLER_BASE) sum2 -= ADLER_BASE;
  return (sum1 + sum2 * 0x10000) >>> 0;
}
