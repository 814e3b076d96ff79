import type { SessionAccess } from '../session-access.js';
import { errorResult, textResult, type ToolResult } from '../tool-result.js';
import { ToolError } from '../tool-error.js';
import type { Env } from '../../util/env.js';
import { describeType } from '../input-checks.js';
import { BashSession } from './bash-session.js';
import type { CommandOutput, ShellOutcome } from './bash-shell.js';
import type { BashOutputCounters, BashOutputLimits } from './output-budget.js';

export const DEFAULT_BASH_TIMEOUT_SECONDS = 120;
/** Output beyond this many characters is cut, as Anthropic's own tools do. */
export const MAX_OUTPUT_CHARS = 30_000;
const START_TIMEOUT_MS = 15_000;

export interface BashToolConfig {
  /** X display number the shell gets as DISPLAY: the session's (its template may name its own). */
  display: (sessionId: string) => number;
  timeoutSeconds: number;
  maxOutputChars?: number;
  /** How much of a shell's output is read, and how fast (SBX_BASH_OUTPUT_*; defaults otherwise). */
  outputLimits?: BashOutputLimits;
  counters?: BashOutputCounters;
}

/** What a `bash_20250124` tool_use input asks for. */
export type BashRequest = { kind: 'run'; command: string } | { kind: 'restart' };

/**
 * The `bash` tool (bash_20250124): `{command}` runs in the session's persistent shell,
 * `{restart: true}` replaces it. Wording follows Anthropic's reference implementation
 * (claude-quickstarts computer_use_demo/tools/bash.py), so a model reads what it expects.
 */
export class BashTool {
  constructor(
    private readonly sessions: SessionAccess,
    private readonly config: BashToolConfig,
  ) {}

  async call(sessionId: string, input: unknown): Promise<ToolResult> {
    // The session first: an unknown or finished session is a 404/409, whatever the input.
    const session = await this.sessions.attachment(sessionId, 'bash', async ({ connection, cleanup }) => {
      const made = new BashSession(connection, {
        display: this.config.display(sessionId),
        timeoutMs: this.config.timeoutSeconds * 1000,
        maxOutputChars: this.config.maxOutputChars ?? MAX_OUTPUT_CHARS,
        startTimeoutMs: START_TIMEOUT_MS,
        ...(this.config.outputLimits ? { outputLimits: this.config.outputLimits } : {}),
        ...(this.config.counters ? { counters: this.config.counters } : {}),
      });
      await cleanup.push('bash shell', () => made.close());
      return made;
    });
    const request = parseBashInput(input);
    if (request.kind === 'restart') {
      await session.restart();
      return textResult('tool has been restarted.');
    }
    return shapeOutcome(await session.run(request.command), this.config.timeoutSeconds);
  }
}

const FIELDS = new Set(['command', 'restart']);

/** Checks a tool_use input; a ToolError says what is wrong in words a model can act on. */
export function parseBashInput(input: unknown): BashRequest {
  if (typeof input !== 'object' || input === null || Array.isArray(input)) {
    throw new ToolError('The bash tool input must be a JSON object: {"command": "<shell code>"} or {"restart": true}.');
  }
  const fields = input as Record<string, unknown>;
  for (const name of Object.keys(fields)) {
    if (!FIELDS.has(name)) {
      throw new ToolError(`Unknown parameter \`${name}\` for the bash tool: it takes \`command\` (a string of shell code) or \`restart\` (true).`);
    }
  }
  // null is taken as "not given": some clients send every optional field.
  const command = fields.command ?? undefined;
  const restart = fields.restart ?? undefined;
  if (restart !== undefined && typeof restart !== 'boolean') {
    throw new ToolError(`Parameter \`restart\` must be a boolean, got ${describeType(restart)}.`);
  }
  if (command !== undefined && typeof command !== 'string') {
    throw new ToolError(`Parameter \`command\` must be a string of shell code, got ${describeType(command)}.`);
  }
  if (restart === true) {
    if (command !== undefined) {
      // The reference silently drops the command; saying so lets the model send it again.
      throw new ToolError('Give either `command` or `restart: true`, not both: restart first, then send the command in a separate call.');
    }
    return { kind: 'restart' };
  }
  if (command === undefined || command === '') throw new ToolError('no command provided.');
  if (command.includes('\0')) {
    throw new ToolError("Parameter `command` contains a NUL character, which a shell command cannot carry; write it as an escape instead, e.g. printf '\\0'.");
  }
  return { kind: 'run', command };
}

/** Turns what the shell did into the tool_result the model reads. */
export function shapeOutcome(outcome: ShellOutcome, timeoutSeconds: number): ToolResult {
  const output = render(outcome.output);
  switch (outcome.kind) {
    case 'completed': {
      const lines = output === '' ? [] : [output];
      if (outcome.exitCode !== 0) lines.push(`<exit code: ${Number.isNaN(outcome.exitCode) ? 'unknown' : outcome.exitCode}>`);
      return textResult(lines.length > 0 ? lines.join('\n') : '(no output)');
    }
    case 'timed_out':
      return withOutput(
        output,
        `timed out: bash has not returned in ${timeoutSeconds} seconds, so the shell was killed and restarted ` +
          '(its working directory, variables and background jobs are reset). ' +
          'Run long jobs in the background with their output in a file, e.g. `cmd > /tmp/cmd.log 2>&1 &`.',
      );
    case 'ended':
      return withOutput(output, endedMessage(outcome));
  }
}

function endedMessage(outcome: Extract<ShellOutcome, { kind: 'ended' }>): string {
  const reset = 'a new shell will be started for the next command (working directory and variables are reset).';
  switch (outcome.reason) {
    case 'exited': {
      const how = outcome.signal ? `was killed by signal ${outcome.signal}` : `has exited with returncode ${outcome.exitCode ?? 'unknown'}`;
      return `bash ${how}; ${reset}`;
    }
    case 'connection_lost':
      return `the connection to the sandbox was lost while the command ran; ${reset}`;
    case 'restarted':
    case 'timed_out':
      return 'the command was stopped because the tool was restarted meanwhile.';
    case 'session_ended':
      return 'the command was stopped because the session is ending.';
    case 'guest_protocol_error':
      return `${outcome.detail ?? 'the shell in the guest broke the tool protocol'}, which no shell of ours does, so it was closed; ${reset}`;
  }
}

function render(output: CommandOutput): string {
  if (output.clippedChars === 0) return output.text;
  return (
    `${output.text}\n<response clipped: ${output.clippedChars} more characters. ` +
    'Redirect long output to a file and read it in parts, e.g. with head, tail or grep -n.>'
  );
}

function withOutput(output: string, message: string): ToolResult {
  return errorResult(output === '' ? message : `${output}\n${message}`);
}

/** Reads SBX_BASH_TIMEOUT_SECONDS (a positive number of seconds), or the default. */
export function bashTimeoutFromEnv(env: Env): number {
  const raw = env.SBX_BASH_TIMEOUT_SECONDS;
  if (raw === undefined || raw === '') return DEFAULT_BASH_TIMEOUT_SECONDS;
  const seconds = Number(raw);
  if (!Number.isFinite(seconds) || seconds <= 0) {
    throw new Error(`SBX_BASH_TIMEOUT_SECONDS must be a positive number of seconds, got "${raw}"`);
  }
  return seconds;
}
