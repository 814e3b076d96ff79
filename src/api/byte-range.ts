/**
 * One byte range of a file from a Range header (RFC 9110 §14): "bytes=a-b", "bytes=a-" or
 * "bytes=-n". What browsers' <video> sends is always one range; several ranges, or any other
 * unit, are answered with the whole file (as the RFC allows). `unsatisfiable`: a 416.
 */
export type ByteRange = { start: number; end: number } | 'whole' | 'unsatisfiable';

export function parseByteRange(header: string | undefined, size: number): ByteRange {
  if (header === undefined) return 'whole';
  const match = /^bytes=(\d{0,15})-(\d{0,15})$/.exec(header.trim());
  if (!match) return 'whole';
  const [, first = '', last = ''] = match;
  if (first === '' && last === '') return 'whole';
  if (first === '') {
    const suffix = Number(last);
    if (suffix === 0 || size === 0) return 'unsatisfiable';
    return { start: Math.max(0, size - suffix), end: size - 1 };
  }
  const start = Number(first);
  const end = last === '' ? size - 1 : Math.min(Number(last), size - 1);
  if (start >= size || end < start) return 'unsatisfiable';
  return { start, end };
}
