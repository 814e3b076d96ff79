export type OutputStream = 'stdout' | 'stderr';

export interface OutputChunk {
  /** Offset of the chunk's first byte in the process's whole output (stdout and stderr in the order they came). */
  offset: number;
  stream: OutputStream;
  data: Buffer;
}

/** What a reader at `offset` gets next: the bytes it missed (dropped), then chunks. */
export interface OutputSlice {
  dropped: number;
  chunks: OutputChunk[];
  /** The offset after the last chunk returned. */
  next: number;
}

/**
 * The recent output of one process, bounded: a ring of chunks addressed by byte offset, so that
 * a reader (a new one replaying, or one that fell behind) asks for "from offset N" and learns
 * exactly how many bytes were dropped before what it gets. Bytes held are reported to the
 * session's budget (`onHeld`), which may ask this log to drop its oldest chunks.
 */
export class OutputLog {
  private chunks: Array<OutputChunk | undefined> = [];
  private head = 0;
  private held = 0;
  /** Offset after the last byte ever pushed. */
  end = 0;
  /** Bytes dropped so far (never read by anyone who was not there in time). */
  droppedBytes = 0;

  constructor(
    private readonly maxBytes: number,
    private readonly onHeld: (delta: number) => void,
  ) {}

  get heldBytes(): number {
    return this.held;
  }

  /** Offset of the oldest byte still held. */
  get start(): number {
    return this.end - this.held;
  }

  push(stream: OutputStream, data: Buffer): void {
    if (data.length === 0) return;
    this.chunks.push({ offset: this.end, stream, data });
    this.end += data.length;
    this.held += data.length;
    this.onHeld(data.length);
    while (this.held > this.maxBytes && this.dropOldest() > 0);
  }

  /** Drops the oldest chunk (not the newest: what just came is kept); returns its size, 0 if none could go. */
  dropOldest(): number {
    if (this.chunks.length - this.head <= 1) return 0;
    const chunk = this.chunks[this.head] as OutputChunk;
    // Let go of its bytes now, not at the next compaction: a thousand dropped chunks of 32 KiB
    // kept alive would be 32 MiB nobody can read.
    this.chunks[this.head] = undefined;
    this.head++;
    if (this.head > 1024 && this.head * 2 > this.chunks.length) {
      this.chunks = this.chunks.slice(this.head);
      this.head = 0;
    }
    this.held -= chunk.data.length;
    this.droppedBytes += chunk.data.length;
    this.onHeld(-chunk.data.length);
    return chunk.data.length;
  }

  /** Up to `maxBytes` of output from `offset` on (whole chunks, the first cut at the offset). */
  read(offset: number, maxBytes: number): OutputSlice {
    const start = this.start;
    let at = Math.max(offset, start);
    const dropped = at - offset;
    const chunks: OutputChunk[] = [];
    let bytes = 0;
    // Chunks are in offset order: find the first that ends after `at` by bisection.
    let lo = this.head;
    let hi = this.chunks.length;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      const c = this.chunks[mid] as OutputChunk;
      if (c.offset + c.data.length <= at) lo = mid + 1;
      else hi = mid;
    }
    for (let i = lo; i < this.chunks.length && bytes < maxBytes; i++) {
      const c = this.chunks[i] as OutputChunk;
      const data = at > c.offset ? c.data.subarray(at - c.offset) : c.data;
      chunks.push({ offset: at, stream: c.stream, data });
      at += data.length;
      bytes += data.length;
    }
    return { dropped, chunks, next: at };
  }

  /** Lets go of everything (the process is forgotten). */
  clear(): void {
    this.onHeld(-this.held);
    this.held = 0;
    this.chunks = [];
    this.head = 0;
  }
}
