import type { FastifyInstance } from 'fastify';
import { InvalidRequestError } from '../../errors.js';
import type { ToolSessions } from '../../sessions/ports.js';
import type { TrajectoryRecorder } from '../../sessions/trajectory/recorder.js';
import { recordedCall, toolResultStep } from '../../sessions/trajectory/recorded-call.js';
import { BashTool } from '../../tools/bash/bash-tool.js';
import type { BashOutputCounters, BashOutputLimits } from '../../tools/bash/output-budget.js';
import { COMMANDS } from '../../tools/editor/editor-input.js';
import { EditorTool } from '../../tools/editor/editor-tool.js';
import { toolAnswer } from '../../tools/tool-error.js';
import { sessionIdParams } from '../schemas.js';

export interface CompanionToolOptions {
  manager: ToolSessions;
  /** X display number of a session's guest (SBX_DISPLAY, or its template's own). */
  display: (sessionId: string) => number;
  /** Per-command timeout of the bash tool (the orchestrator's config: SBX_BASH_TIMEOUT_SECONDS). */
  bashTimeoutSeconds: number;
  /** How much of a shell's output is read, and how fast (SBX_BASH_OUTPUT_*), and where drops and throttling are counted. */
  bashOutput?: BashOutputLimits;
  bashCounters?: BashOutputCounters;
  /** Where each call is stored as a step of the session's trajectory. */
  trajectory?: TrajectoryRecorder;
}

interface IdParams {
  id: string;
}

const responses = {
  200: { $ref: 'ToolResult#' },
  400: { $ref: 'Error#' },
  404: { $ref: 'Error#' },
  409: { $ref: 'Error#' },
  410: { $ref: 'Error#' },
  502: { $ref: 'Error#' },
};

/*
 * Body schemas document the tool inputs in the OpenAPI document, but do not reject
 * anything (attachValidation): a model's mistake must come back as an is_error tool_result
 * that names the field, which the tools' own checks write, not as an HTTP 400.
 */
const bashBody = {
  type: 'object',
  description: 'A bash_20250124 tool_use input exactly as the model sent it: `command`, or `restart: true`',
  properties: {
    command: { type: 'string', description: "Shell code to run in the session's persistent bash (as the guest user, DISPLAY set)" },
    restart: { type: 'boolean', description: 'true: kill the shell and everything it started, and start a fresh one' },
  },
  additionalProperties: true,
} as const;

const editorBody = {
  type: 'object',
  description: 'A text_editor_20250728 (str_replace_based_edit_tool) tool_use input exactly as the model sent it',
  required: ['command', 'path'],
  properties: {
    command: { type: 'string', enum: [...COMMANDS] },
    path: { type: 'string', description: 'Absolute path in the sandbox' },
    view_range: {
      type: 'array',
      items: { type: 'integer' },
      minItems: 2,
      maxItems: 2,
      description: 'view: [first line, last line], 1-based; -1 as last means to the end',
    },
    file_text: { type: 'string', description: 'create: the whole content of the new file' },
    old_str: { type: 'string', description: 'str_replace: text that occurs exactly once in the file' },
    new_str: { type: 'string', description: 'str_replace: its replacement (default: empty)' },
    insert_line: { type: 'integer', description: 'insert: the line after which to insert (0: at the top)' },
    insert_text: { type: 'string', description: 'insert: the text to insert' },
  },
  additionalProperties: true,
} as const;

/**
 * POST /v1/sessions/:id/tools/bash and /tools/str_replace_based_edit_tool: the companion
 * tools of the computer-use loop, over the session's SSH connection. The body is the model's
 * tool_use input as sent; the answer is the tool_result content, with is_error for what the
 * model can correct or should know (HTTP 200, so the loop just forwards it). An unknown
 * session is a 404, one that is not ready a 409, an unreachable guest a 502.
 */
export async function companionToolRoutes(app: FastifyInstance, opts: CompanionToolOptions): Promise<void> {
  const bash = new BashTool(opts.manager, {
    display: opts.display,
    timeoutSeconds: opts.bashTimeoutSeconds,
    ...(opts.bashOutput ? { outputLimits: opts.bashOutput } : {}),
    ...(opts.bashCounters ? { counters: opts.bashCounters } : {}),
  });
  const editor = new EditorTool(opts.manager);

  app.post<{ Params: IdParams; Body: unknown }>(
    '/v1/sessions/:id/tools/bash',
    {
      attachValidation: true,
      schema: {
        summary: "The bash tool: run a command in the session's persistent shell, or restart it",
        description:
          'Output is stdout and stderr as they interleaved, the first 30,000 characters of it, ' +
          'with the exit status when it is not 0. Commands of one session run one at a time.',
        tags: ['tools'],
        params: sessionIdParams,
        body: bashBody,
        response: responses,
      },
    },
    async (request) => {
      rejectBadParams(request.validationError);
      // A command may run for minutes: the idle timeout waits for it (the lifetime does not).
      const { id } = request.params;
      const call = { sessionId: id, tool: 'bash' as const, input: request.body };
      return opts.manager.whileBusy(id, () => recordedCall(opts.trajectory, call, () => toolAnswer(() => bash.call(id, request.body)), toolResultStep));
    },
  );

  app.post<{ Params: IdParams; Body: unknown }>(
    '/v1/sessions/:id/tools/str_replace_based_edit_tool',
    {
      attachValidation: true,
      schema: {
        summary: 'The text editor tool: view, create, str_replace, insert (files travel over SFTP)',
        tags: ['tools'],
        params: sessionIdParams,
        body: editorBody,
        response: responses,
      },
    },
    async (request) => {
      rejectBadParams(request.validationError);
      const { id } = request.params;
      const call = { sessionId: id, tool: 'str_replace_based_edit_tool' as const, input: request.body };
      return opts.manager.whileBusy(id, () => recordedCall(opts.trajectory, call, () => toolAnswer(() => editor.call(id, request.body)), toolResultStep));
    },
  );
}

/** Only the body's schema is advisory; a malformed session id is still a 400. */
function rejectBadParams(error: (Error & { validationContext?: string }) | undefined): void {
  if (error && error.validationContext !== 'body') throw new InvalidRequestError(error.message);
}
