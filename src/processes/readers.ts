import type { OutputChunk } from './output-log.js';

/** Why a process stopped running. */
export type ProcessEndReason = 'exited' | 'killed' | 'timed_out' | 'session_ended' | 'connection_lost';

export interface ProcessExit {
  exitCode: number | null;
  /** The signal that ended it, without SIG (as SSH names it: TERM, KILL...). */
  signal: string | null;
  reason: ProcessEndReason;
}

/** Where one reader's output goes: an SSE response, a WebSocket. */
export interface ReaderTarget {
  /** Writes a chunk; false when the client's buffer is full (then `drained` is awaited). */
  output(chunk: OutputChunk): boolean;
  /** `bytes` of output before `offset` were dropped before this reader got them. */
  dropped(offset: number, bytes: number): boolean;
  /** Calls back once the client's buffer has room again. */
  drained(callback: () => void): void;
  /** The process ended and every byte held was written: the target ends. */
  exit(exit: ProcessExit, end: number): void;
  /** The reader was disconnected (it held the process back too long, or the process was forgotten). */
  evicted(reason: string): void;
}

/** What a reader needs of its process. */
export interface ReadableProcess {
  read(offset: number, maxBytes: number): { dropped: number; chunks: OutputChunk[]; next: number };
  readonly exitInfo: ProcessExit | undefined;
  readonly outputEnd: number;
  readerMoved(): void;
  detach(reader: OutputReader): void;
}

/** Bytes handed to a target in one go before it is asked for more. */
const READ_BYTES = 64 * 1024;

/**
 * One client following a process's output from an offset: it pulls from the process's log as
 * fast as its target takes it, waits for 'drain' when the client is slow, and learns how many
 * bytes it missed when it fell further behind than the log holds.
 */
export class OutputReader {
  cursor: number;
  /** When the cursor last moved (a reader that holds the process back and does not move is evicted). */
  movedAt = performance.now();
  private waiting = false;
  closed = false;

  constructor(
    private readonly process: ReadableProcess,
    private readonly target: ReaderTarget,
    from: number,
  ) {
    this.cursor = from;
  }

  /** Bytes of output that exist but this reader has not taken. */
  get behind(): number {
    return this.process.outputEnd - this.cursor;
  }

  pump(): void {
    if (this.closed || this.waiting) return;
    let room = true;
    while (room) {
      const slice = this.process.read(this.cursor, READ_BYTES);
      if (slice.dropped > 0) {
        room = this.target.dropped(this.cursor + slice.dropped, slice.dropped);
        this.cursor += slice.dropped;
      }
      if (slice.chunks.length === 0) break;
      for (const chunk of slice.chunks) {
        room = this.target.output(chunk) && room;
        this.cursor = chunk.offset + chunk.data.length;
      }
      this.movedAt = performance.now();
    }
    if (!room) {
      this.waiting = true;
      this.target.drained(() => {
        this.waiting = false;
        this.pump();
      });
    } else {
      const exit = this.process.exitInfo;
      if (exit && this.cursor >= this.process.outputEnd) {
        this.close();
        this.target.exit(exit, this.cursor);
      }
    }
    this.process.readerMoved();
  }

  /** Stops following (the client went away, or it was evicted). */
  close(): void {
    if (this.closed) return;
    this.closed = true;
    this.process.detach(this);
  }

  evict(reason: string): void {
    if (this.closed) return;
    this.close();
    this.target.evicted(reason);
  }
}
