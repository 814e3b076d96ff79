/** What an event stream writes to: a response (http.ServerResponse) in the server. */
export interface EventSink {
  write(chunk: string): boolean;
  end(): void;
  destroy(): void;
  readonly writableLength: number;
}

/**
 * Server-Sent Events to one client, bounded: a client that leaves more than `unreadLimit`
 * bytes unread is dropped (its connection destroyed) rather than buffered for without end.
 * Events are numbered from 0 (`id:`), named by their `type` (`event:`), JSON in `data:`.
 */
export class EventStream<E extends { type: string }> {
  private n = 0;
  closed = false;
  /** Whether the stream ended by dropping a slow reader. */
  dropped = false;

  constructor(
    private readonly sink: EventSink,
    private readonly unreadLimit: number,
    private readonly onClose: () => void,
    private readonly isLast: (event: E) => boolean,
  ) {}

  send(event: E): void {
    if (this.closed) return;
    this.sink.write(`id: ${this.n++}\nevent: ${event.type}\ndata: ${JSON.stringify(event)}\n\n`);
    if (this.isLast(event)) {
      this.close();
      this.sink.end();
    } else if (this.sink.writableLength > this.unreadLimit) {
      this.dropped = true;
      this.close();
      this.sink.destroy();
    }
  }

  /** The client went away (or the stream ended): no more writes. */
  close(): void {
    if (this.closed) return;
    this.closed = true;
    this.onClose();
  }
}
