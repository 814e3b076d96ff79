import { OrchestratorError } from '../errors.js';

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
    super(message, 502, 'guest_error');
  }
}
