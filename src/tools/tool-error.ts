import { OrchestratorError } from '../errors.js';
import { errorResult, type ToolResult } from './tool-result.js';

/**
 * A mistake or failure the model can read and act on (a bad field, a missing file, a
 * command that timed out). It is answered as an `is_error` tool_result with HTTP 200, so
 * the agent loop forwards it to the model like any other result.
 */
export class ToolError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'ToolError';
  }
}

/**
 * The sandbox could not be reached to run a tool (the SSH connection is down, a channel
 * could not be opened). Not the model's doing, so it is an HTTP error, not a tool_result.
 */
export class GuestToolError extends OrchestratorError {
  constructor(message: string) {
    super('guest_error', message);
  }
}

/**
 * A companion tool's answer: its result, a ToolError as an is_error result the model reads,
 * an OrchestratorError as is (404, 409...), anything else as the guest being unreachable.
 * Shared by the tool routes and the built-in loop, so both answer alike.
 */
export async function toolAnswer(work: () => Promise<ToolResult>): Promise<ToolResult> {
  try {
    return await work();
  } catch (err) {
    if (err instanceof ToolError) return errorResult(err.message);
    if (err instanceof OrchestratorError) throw err;
    throw new GuestToolError(`the tool could not run in the sandbox: ${(err as Error).message}`);
  }
}
