import { OrchestratorError } from '../../errors.js';
import type { StepReport, TrajectoryRecorder } from './recorder.js';
import type { StepTool } from './trajectory-store.js';
import type { ToolResult } from '../../tools/tool-result.js';

/** What a finished call says about itself, for its step. */
export type StepOutcome = Pick<StepReport, 'durationMs' | 'settleMs' | 'output' | 'outputIsTyped' | 'cursor' | 'error' | 'image'>;

/**
 * Runs one call of a route and stores it as a step: its input, what `describe` makes of its
 * result, or its error. A call on a session that does not exist (404) is nobody's step. The
 * step is stored after the answer is ready and before it is sent, so a client that reads the
 * trajectory right after a call sees it; the call's own duration is measured without it.
 */
export async function recordedCall<T>(
  recorder: TrajectoryRecorder | undefined,
  call: { sessionId: string; tool: StepTool; input: unknown },
  work: () => Promise<T>,
  describe: (result: T, durationMs: number) => StepOutcome,
): Promise<T> {
  if (!recorder) return work();
  const startedAt = Date.now();
  const started = performance.now();
  try {
    const result = await work();
    await recorder.record({ ...call, startedAt, ...describe(result, performance.now() - started) });
    return result;
  } catch (err) {
    const durationMs = performance.now() - started;
    if (!(err instanceof OrchestratorError && err.category === 'not_found')) {
      const error = err instanceof OrchestratorError ? { code: err.code, message: err.message } : { code: 'internal', message: 'the call failed' };
      await recorder.record({ ...call, startedAt, durationMs, error });
    }
    throw err;
  }
}

/** A companion tool's result as a trajectory step: its text, and is_error as an error the model was shown. */
export function toolResultStep(result: ToolResult, durationMs: number): StepOutcome {
  const text = result.content.flatMap((block) => (block.type === 'text' ? [block.text] : [])).join('\n');
  return result.is_error ? { durationMs, error: { code: 'tool_error', message: text } } : { durationMs, output: text };
}
