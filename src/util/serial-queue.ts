/**
 * Runs tasks one at a time, in the order they were queued. A task's failure is its own
 * caller's: it does not stop the tasks queued after it.
 */
export class SerialQueue {
  private tail: Promise<unknown> = Promise.resolve();
  /** Tasks queued or running now. */
  private count = 0;

  run<T>(task: () => Promise<T>): Promise<T> {
    this.count += 1;
    const result = this.tail.then(task).finally(() => (this.count -= 1));
    this.tail = result.catch(() => undefined);
    return result;
  }

  /** How many tasks are queued or running (0: a task run now would start at once). */
  get pending(): number {
    return this.count;
  }
}
