import { randomBytes } from 'node:crypto';

/**
 * The line the shell prints after each command (and once at start):
 *
 *     \n<<sbx:NONCE:VALUE>>\n
 *
 * VALUE is the command's exit status (or, at start, the shell's pid). NONCE is fresh random
 * for every command and is never in a variable the command could read: it travels only in
 * the line bash parses after the command has run. So no output of the command, accidental
 * or not, can pass for the end of it, unlike a fixed sentinel such as the reference's
 * `<<exit>>`.
 */
export function newNonce(): string {
  return randomBytes(16).toString('hex');
}

/**
 * Shell code printing the marker with the value of `$?` or `$$`. The nonce is a separate
 * argument, so even under `set -x` or `set -v` the marker never appears until printf runs.
 * `builtin` so that a function the model defined called printf cannot take its place.
 */
export function printMarker(nonce: string, value: '$?' | '$$'): string {
  return `builtin printf '\\n<<sbx:%s:%d>>\\n' ${nonce} "${value}"`;
}

const TERMINATOR = Buffer.from('>>\n');

/**
 * Finds one marker in a stream of output chunks. Bytes before it go to `sink` as soon as
 * they cannot be the start of the marker; only a possible partial marker is held back.
 */
export class MarkerScanner {
  private readonly prefix: Buffer;
  private held = Buffer.alloc(0);

  constructor(
    nonce: string,
    private readonly sink: (bytes: Buffer) => void,
  ) {
    this.prefix = Buffer.from(`\n<<sbx:${nonce}:`);
  }

  /** Takes a chunk; once the marker is complete, returns its value and the bytes after it. */
  feed(chunk: Buffer): { value: number; rest: Buffer } | undefined {
    const data = this.held.length > 0 ? Buffer.concat([this.held, chunk]) : chunk;
    const start = data.indexOf(this.prefix);
    if (start === -1) {
      // Keep the longest tail that could still grow into the marker.
      const keep = Math.min(data.length, this.prefix.length - 1);
      this.pass(data.subarray(0, data.length - keep));
      this.held = Buffer.from(data.subarray(data.length - keep));
      return undefined;
    }
    this.pass(data.subarray(0, start));
    const valueStart = start + this.prefix.length;
    const end = data.indexOf(TERMINATOR, valueStart);
    if (end === -1) {
      this.held = Buffer.from(data.subarray(start));
      return undefined;
    }
    this.held = Buffer.alloc(0);
    // printf's %d always prints an integer; NaN would mean the shell was not ours to parse.
    const value = Number.parseInt(data.subarray(valueStart, end).toString('latin1'), 10);
    return { value, rest: Buffer.from(data.subarray(end + TERMINATOR.length)) };
  }

  /** Passes on whatever is held back (the command ended without a marker). */
  flush(): void {
    this.pass(this.held);
    this.held = Buffer.alloc(0);
  }

  private pass(bytes: Buffer): void {
    if (bytes.length > 0) this.sink(bytes);
  }
}
