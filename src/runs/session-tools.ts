import { DesktopError } from '../computer/desktop.js';
import { InvalidRequestError } from '../errors.js';
import type { ComputerActions, ToolSessions } from '../sessions/ports.js';
import type { TrajectoryRecorder } from '../sessions/trajectory/recorder.js';
import { recordedCall, toolResultStep } from '../sessions/trajectory/recorded-call.js';
import { BashTool } from '../tools/bash/bash-tool.js';
import type { BashOutput } from '../tools/bash/output-budget.js';
import { EditorTool } from '../tools/editor/editor-tool.js';
import { toolAnswer } from '../tools/tool-error.js';
import { errorResult, imageContent, type ToolResult } from '../tools/tool-result.js';

export type RunToolSessions = ComputerActions & ToolSessions;

/** A tool call's result, and the trajectory step that stored its screenshot (if one did). */
export interface ToolCallResult {
  result: ToolResult;
  screenshotStep?: number;
}

/**
 * The three tools of the loop, called in process: the same functions, checks and trajectory
 * steps as POST /v1/sessions/:id/tools/{computer,bash,str_replace_based_edit_tool}, without
 * HTTP. A mistake of the model is an is_error result; a session that is gone or a guest that
 * cannot be reached throws (an OrchestratorError), which ends the run.
 */
export class SessionTools {
  private readonly bash: BashTool;
  private readonly editor: EditorTool;

  constructor(
    private readonly sessions: RunToolSessions,
    options: { bashTimeoutSeconds: number; bashOutput?: BashOutput; trajectory?: TrajectoryRecorder },
  ) {
    this.bash = new BashTool(sessions, {
      display: (id) => sessions.displayOf(id),
      timeoutSeconds: options.bashTimeoutSeconds,
      ...(options.bashOutput ? { outputLimits: options.bashOutput.limits, counters: options.bashOutput.counters } : {}),
    });
    this.editor = new EditorTool(sessions);
    this.trajectory = options.trajectory;
  }

  private readonly trajectory: TrajectoryRecorder | undefined;

  /** Calls the tool a tool_use block names; an unknown name is a tool error, as the API would have it. */
  async call(sessionId: string, name: string, input: unknown, editorName: string): Promise<ToolCallResult> {
    if (name === 'computer') return this.computer(sessionId, input);
    if (name === 'bash') return { result: await this.companion(sessionId, 'bash', input, () => this.bash.call(sessionId, input)) };
    if (name === editorName) {
      return { result: await this.companion(sessionId, 'str_replace_based_edit_tool', input, () => this.editor.call(sessionId, input)) };
    }
    return { result: errorResult(`no tool named ${JSON.stringify(name.slice(0, 64))}: the tools are computer, bash and ${editorName}`) };
  }

  private async computer(sessionId: string, input: unknown): Promise<ToolCallResult> {
    try {
      const outcome = await recordedCall(
        this.trajectory,
        { sessionId, tool: 'computer', input },
        () => this.sessions.act(sessionId, input, { screenshotAfter: true }),
        (o) => ({ durationMs: o.durationMs, settleMs: o.settleMs, output: o.output, cursor: o.cursor, image: o.image }),
      );
      const result: ToolResult = { content: [], is_error: false };
      if (outcome.output !== undefined) result.content.push({ type: 'text', text: outcome.output });
      if (outcome.image) result.content.push(imageContent(outcome.image));
      return { result, screenshotStep: outcome.image ? this.latestScreenshotStep(sessionId) : undefined };
    } catch (err) {
      if (!(err instanceof InvalidRequestError || err instanceof DesktopError)) throw err;
      return { result: errorResult(err.message) };
    }
  }

  /** The step just stored, if its screenshot was kept (the trajectory's caps may drop it). */
  private latestScreenshotStep(sessionId: string): number | undefined {
    const row = this.trajectory?.get(sessionId);
    if (!row || row.steps === 0) return undefined;
    return this.trajectory?.reader.step(sessionId, row.steps)?.afterImage ? row.steps : undefined;
  }

  private companion(sessionId: string, tool: 'bash' | 'str_replace_based_edit_tool', input: unknown, work: () => Promise<ToolResult>): Promise<ToolResult> {
    return this.sessions.whileBusy(sessionId, () => recordedCall(this.trajectory, { sessionId, tool, input }, () => toolAnswer(work), toolResultStep));
  }
}
