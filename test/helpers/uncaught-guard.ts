/**
 * Records every exception that reached the process uncaught (and every unhandled rejection)
 * while a test file runs. In the orchestrator, such an error ends the process with every
 * tenant's sessions; here it must be a test failure that names it, not a silent exit or a
 * failure blamed on whatever test happened to run. The monitor only watches: node:test's own
 * handler still attributes the error to the running test.
 */
export interface UncaughtGuard {
  readonly seen: readonly Error[];
  /** Throws, naming them, if anything went uncaught since the guard was made. */
  assertNone(): void;
}

export function watchUncaught(): UncaughtGuard {
  const seen: Error[] = [];
  const record = (err: unknown) => seen.push(err instanceof Error ? err : new Error(String(err)));
  process.on('uncaughtExceptionMonitor', record);
  process.on('unhandledRejection', record);
  return {
    seen,
    assertNone() {
      if (seen.length > 0) {
        throw new Error(`uncaught in this process (an orchestrator would have died): ${seen.map((e) => e.stack ?? e.message).join('\n---\n')}`);
      }
    },
  };
}
