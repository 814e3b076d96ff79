/**
 * Where the time of one multi-step job (a create, a claim) went: each step's duration, in the
 * order the steps ended. Logged with the 'session ready' line and read by the bench
 * (`npm run bench -- create`), so the figures name the step that costs, not just the total.
 */
export class StepTimes {
  readonly steps: Array<{ step: string; ms: number }> = [];

  /** `since`: when the first step began (performance.now()), by default now. */
  constructor(private last = performance.now()) {}

  /** Ends the step running since the last mark (or since construction). */
  mark(step: string): void {
    const now = performance.now();
    this.steps.push({ step, ms: Math.round((now - this.last) * 10) / 10 });
    this.last = now;
  }

  /** `{ step: ms }`, for a log line (a step named twice adds up). */
  toJSON(): Record<string, number> {
    const out: Record<string, number> = {};
    for (const { step, ms } of this.steps) out[step] = Math.round(((out[step] ?? 0) + ms) * 10) / 10;
    return out;
  }
}
