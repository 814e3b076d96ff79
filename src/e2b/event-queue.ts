/**
 * The events of one server stream, from the push side (a process's reader, a directory watch)
 * to Connect's pull side (it asks for the next message only once the previous one was written
 * to the client). At most `maxBytes` wait here: push says false beyond that, and onDrain calls
 * back once Connect has taken them below it again, so a client that does not read holds its
 * producer back instead of growing this queue.
 */
export class EventQueue<T> implements AsyncIterable<T> {
  private readonly items: Array<{ item: T; bytes: number }> = [];
  private queued = 0;
  private ended = false;
  private failure: Error | undefined;
  private wake: (() => void) | undefined;
  private readonly drainHooks: Array<() => void> = [];

  constructor(private readonly maxBytes: number) {}

  /** Queues an event of `bytes` bytes; false once the queue is full (wait for onDrain). Ignored once ended. */
  push(item: T, bytes = 0): boolean {
    if (this.ended) return true;
    this.items.push({ item, bytes });
    this.queued += bytes;
    this.wake?.();
    return this.queued < this.maxBytes;
  }

  /** Calls back once the queue is below its size again (or has ended). */
  onDrain(callback: () => void): void {
    if (this.ended || this.queued < this.maxBytes) callback();
    else this.drainHooks.push(callback);
  }

  /** No more events: the stream ends after those queued, with `error` if given (then queued ones are dropped). */
  end(error?: Error): void {
    if (this.ended) return;
    this.ended = true;
    if (error !== undefined) {
      this.failure = error;
      this.items.length = 0;
    }
    this.wake?.();
    for (const hook of this.drainHooks.splice(0)) hook();
  }

  /** Nothing waits to be taken. */
  get isEmpty(): boolean {
    return this.items.length === 0;
  }

  get isEnded(): boolean {
    return this.ended;
  }

  async *[Symbol.asyncIterator](): AsyncGenerator<T> {
    for (;;) {
      const next = this.items.shift();
      if (next) {
        this.queued -= next.bytes;
        if (this.queued < this.maxBytes) for (const hook of this.drainHooks.splice(0)) hook();
        yield next.item;
        continue;
      }
      if (this.ended) {
        if (this.failure !== undefined) throw this.failure;
        return;
      }
      await new Promise<void>((resolve) => (this.wake = resolve));
      this.wake = undefined;
    }
  }
}
