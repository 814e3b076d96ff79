/**
 * Runs tasks one at a time, in the order they were queued. A task's failure is its own
 * caller's: it does not stop the tasks queued after it.
 */
export class SerialQueue {
  private tail: Promise<unknown> = Promise.resolve();

  run<T>(task: () => Promise<T>): Promise<T> {
    const result = this.tail.then(task);
    this.tail = result.catch(() => undefined);
    return result;
  }
}
