/**
 * The output of one shell command, kept within a bound however much the command prints: the
 * first `maxChars` characters are kept, the rest is only counted. A command like `yes` can
 * print for minutes; the orchestrator's memory must not follow it.
 */
export class ShellOutput {
  private readonly head: Buffer[] = [];
  private headBytes = 0;
  /** Characters (code points) beyond the kept bytes, counted from their UTF-8 lead bytes. */
  private droppedChars = 0;
  private lastByte: number | undefined;
  /** A UTF-8 character takes at most 4 bytes; the extra 4 cover one cut in half at the end. */
  private readonly maxHeadBytes: number;

  constructor(private readonly maxChars: number) {
    this.maxHeadBytes = maxChars * 4 + 4;
  }

  /** Takes output; returns how many of its bytes were only counted, not kept. */
  push(bytes: Buffer): number {
    if (bytes.length === 0) return 0;
    this.lastByte = bytes[bytes.length - 1];
    const room = this.maxHeadBytes - this.headBytes;
    if (room > 0) {
      const kept = bytes.subarray(0, room);
      this.head.push(kept);
      this.headBytes += kept.length;
    }
    if (bytes.length <= room) return 0;
    const dropped = bytes.subarray(Math.max(room, 0));
    this.droppedChars += countChars(dropped);
    return dropped.length;
  }

  get isEmpty(): boolean {
    return this.lastByte === undefined;
  }

  /**
   * The text, without one final newline (as the reference tool does), cut to `maxChars`
   * characters; `clippedChars` says how many more there were.
   */
  finish(): { text: string; clippedChars: number } {
    let text = Buffer.concat(this.head).toString('utf8');
    if (this.droppedChars === 0 && this.lastByte === 0x0a) text = text.slice(0, -1);
    const cut = indexAfterCodePoints(text, this.maxChars);
    if (cut === undefined) return { text, clippedChars: this.droppedChars };
    return { text: text.slice(0, cut), clippedChars: countCodePoints(text.slice(cut)) + this.droppedChars };
  }
}

/**
 * UTF-8 characters in bytes: every byte that is not a continuation byte (10xxxxxx) starts
 * one. An indexed loop (no iterator, no allocation): it runs over every byte a command
 * prints past its kept head, at the rate the output budget lets in (output-budget.ts).
 */
function countChars(bytes: Buffer): number {
  let continuation = 0;
  for (let i = 0; i < bytes.length; i++) if (((bytes[i] as number) & 0xc0) === 0x80) continuation++;
  return bytes.length - continuation;
}

function countCodePoints(text: string): number {
  let count = 0;
  for (const _ of text) count++;
  return count;
}

/** The string index after `n` code points, or undefined when the text is not longer than that. */
function indexAfterCodePoints(text: string, n: number): number | undefined {
  let index = 0;
  for (let seen = 0; seen < n; seen++) {
    if (index >= text.length) return undefined;
    index += (text.codePointAt(index) as number) > 0xffff ? 2 : 1;
  }
  return index < text.length ? index : undefined;
}
