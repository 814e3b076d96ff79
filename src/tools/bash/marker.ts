import { randomBytes } from 'node:crypto';
import { GuestProtocolError } from '../../errors.js';

/**
 * The line the shell prints after each command (and once at start):
 *
 *     <<sbx:NONCE:VALUE>>\n
 *
 * VALUE is the command's exit status (or, at start, the shell's pid). NONCE is fresh random
 * for every command and is never in a variable the command could read: it travels only in
 * the line bash parses after the command has run. So no output of the command, accidental
 * or not, can pass for the end of it, unlike a fixed sentinel such as the reference's
 * `<<exit>>`.
 *
 * It has one newline, at its end, because bash line-buffers its standard output: a newline
 * before it was written apart from the rest, and a background job writing to the same pipe
 * (`(cat /dev/urandom | base64 &)`) could slip its bytes between the two writes, so that the
 * marker was never recognised and the command ran into its timeout (seen once the output was
 * throttled, issue 21). One line is one write(2), which a pipe never splits. The marker is
 * found wherever it starts: the nonce, not a line start, makes it ours.
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
  return `builtin printf '<<sbx:%s:%d>>\\n' ${nonce} "${value}"`;
}

const TERMINATOR = Buffer.from('>>\n');
/** printf's %d of an exit status or a pid: at most "-2147483648". */
const MAX_VALUE_CHARS = 11;
/** What may follow the marker's prefix before its terminator has surely come. */
const MAX_TAIL_BYTES = MAX_VALUE_CHARS + TERMINATOR.length;

/**
 * Finds one marker in a stream of output chunks. Bytes before it go to `sink` as soon as
 * they cannot be the start of the marker; only a possible partial marker is held back, so
 * what is held never exceeds the marker's own length, and each chunk is scanned once (with
 * at most that held tail before it), however much the command prints.
 *
 * Once the prefix (with its nonce) has come, the value and terminator must follow within
 * MAX_TAIL_BYTES: anything else is a shell that is not ours to parse (only our printf knows
 * the nonce), and feed() throws a GuestProtocolError rather than hold on.
 */
export class MarkerScanner {
  private readonly prefix: Buffer;
  /** Before the prefix: a tail that could grow into it; after: the value read so far. */
  private held = Buffer.alloc(0);
  private prefixSeen = false;

  constructor(
    nonce: string,
    private readonly sink: (bytes: Buffer) => void,
  ) {
    this.prefix = Buffer.from(`<<sbx:${nonce}:`);
  }

  /**
   * Takes a chunk; once the marker is complete, returns its value and the bytes after it.
   * The chunk itself is searched in place (Buffer.indexOf, native); only the held tail and
   * the chunk's first bytes, where a marker could straddle the two, are joined and searched
   * apart, so a flood of output is never copied or looked at byte by byte in JavaScript.
   */
  feed(chunk: Buffer): { value: number; rest: Buffer } | undefined {
    if (this.prefixSeen) return this.feedTail(chunk);
    const reach = this.prefix.length - 1;
    if (this.held.length > 0) {
      // Small pieces: joining them costs nothing.
      if (chunk.length <= 2 * reach) return this.scan(Buffer.concat([this.held, chunk]));
      // A marker that starts in the held tail ends within the chunk's first `reach` bytes.
      const joint = Buffer.concat([this.held, chunk.subarray(0, reach)]);
      const start = joint.indexOf(this.prefix);
      if (start !== -1) return this.prefixFound(joint.subarray(0, start), chunk.subarray(start + this.prefix.length - this.held.length));
      this.pass(this.held);
      this.held = Buffer.alloc(0);
    }
    return this.scan(chunk);
  }

  /** Searches `data`, with nothing held before it. */
  private scan(data: Buffer): { value: number; rest: Buffer } | undefined {
    const start = data.indexOf(this.prefix);
    if (start === -1) {
      // Keep the longest tail that could still grow into the marker.
      const keep = Math.min(data.length, this.prefix.length - 1);
      this.pass(data.subarray(0, data.length - keep));
      this.held = Buffer.from(data.subarray(data.length - keep));
      return undefined;
    }
    return this.prefixFound(data.subarray(0, start), data.subarray(start + this.prefix.length));
  }

  private prefixFound(before: Buffer, after: Buffer): { value: number; rest: Buffer } | undefined {
    this.pass(before);
    this.prefixSeen = true;
    this.held = Buffer.alloc(0);
    return this.feedTail(after);
  }

  /** After the prefix: the value and the terminator, within MAX_TAIL_BYTES. */
  private feedTail(bytes: Buffer): { value: number; rest: Buffer } | undefined {
    const before = this.held.length;
    const window = Buffer.concat([this.held, bytes.subarray(0, MAX_TAIL_BYTES - before)]);
    const end = window.indexOf(TERMINATOR);
    if (end === -1) {
      if (window.length >= MAX_TAIL_BYTES) throw markerError('marker_overrun', 'an end-of-command marker that never ends');
      this.held = window;
      return undefined;
    }
    const text = window.subarray(0, end).toString('latin1');
    if (!/^-?\d{1,10}$/.test(text)) throw markerError('bad_marker', 'an end-of-command marker without a number');
    this.held = Buffer.alloc(0);
    this.prefixSeen = false;
    // The terminator ends at `end + 3` of the window, of which `before` bytes were held.
    return { value: Number.parseInt(text, 10), rest: Buffer.from(bytes.subarray(end + TERMINATOR.length - before)) };
  }

  /** Passes on whatever is held back (the command ended without a marker). */
  flush(): void {
    if (this.prefixSeen) this.pass(this.prefix);
    this.pass(this.held);
    this.held = Buffer.alloc(0);
    this.prefixSeen = false;
  }

  private pass(bytes: Buffer): void {
    if (bytes.length > 0) this.sink(bytes);
  }
}

function markerError(reason: string, what: string): GuestProtocolError {
  return new GuestProtocolError('bash', reason, `the shell in the guest sent ${what}`);
}
