import { crc32 } from 'node:zlib';

/**
 * A PNG file around a zlib stream of RGB rows: signature, IHDR (8-bit RGB, no interlace),
 * one IDAT chunk holding the stream, IEND. Written into one buffer from the stream's parts,
 * so that a stream assembled from pieces (banded-png.ts) is not first concatenated.
 */

/** zlib level 2 (of Node's zlib): fast deflate, ~1.4 ms for a 1024x768 text screen (see docs/benchmarks.md). */
export const PNG_ZLIB_LEVEL = 2;

const SIGNATURE = Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]);
/** Length, type and CRC around each chunk's data. */
const CHUNK_OVERHEAD = 12;
const IHDR_BYTES = 13;
/** Colour type 2 (truecolour, RGB), 8 bits per sample. */
const COLOUR_TYPE_RGB = 2;

/** Where the IDAT chunk's data starts in a file written by writePng. */
export const IDAT_DATA_OFFSET = SIGNATURE.length + CHUNK_OVERHEAD + IHDR_BYTES + 8;

/** An RGB PNG of `width` x `height` whose IDAT holds `stream` (a zlib stream, given in parts). */
export function writePng(width: number, height: number, stream: readonly Uint8Array[]): Buffer {
  const streamBytes = stream.reduce((sum, part) => sum + part.length, 0);
  const out = Buffer.allocUnsafe(SIGNATURE.length + 3 * CHUNK_OVERHEAD + IHDR_BYTES + streamBytes);
  let at = SIGNATURE.copy(out, 0);
  at = startChunk(out, at, 'IHDR', IHDR_BYTES);
  out.writeUInt32BE(width, at);
  out.writeUInt32BE(height, at + 4);
  out[at + 8] = 8; // bits per sample
  out[at + 9] = COLOUR_TYPE_RGB;
  out[at + 10] = 0; // compression method 0 (zlib)
  out[at + 11] = 0; // filter method 0
  out[at + 12] = 0; // no interlace
  at = endChunk(out, at + IHDR_BYTES, IHDR_BYTES);
  at = startChunk(out, at, 'IDAT', streamBytes);
  for (const part of stream) {
    out.set(part, at);
    at += part.length;
  }
  at = endChunk(out, at, streamBytes);
  at = startChunk(out, at, 'IEND', 0);
  endChunk(out, at, 0);
  return out;
}

function startChunk(out: Buffer, at: number, type: string, length: number): number {
  out.writeUInt32BE(length, at);
  out.write(type, at + 4, 'latin1');
  return at + 8;
}

/** Writes the CRC-32 of the chunk's type and data, which end at `end`; returns where the next chunk starts. */
function endChunk(out: Buffer, end: number, length: number): number {
  out.writeUInt32BE(crc32(out.subarray(end - length - 4, end)) >>> 0, end);
  return end + 4;
}
