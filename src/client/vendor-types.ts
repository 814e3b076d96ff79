/**
 * Other vendors' computer-use shapes as the API takes and answers them
 * (POST /v1/sessions/:id/tools/openai-computer and /tools/gemini-computer).
 */
import type { SessionInfo } from './api-types.js';

/** The session view's `tools`: each vendor's tool definition, to pass as is. */
export type VendorTools = SessionInfo['tools'];

/** One OpenAI computer_call action; x, y in the display size of tools.openai. */
export type OpenAIComputerAction =
  | { type: 'click'; x: number; y: number; button?: 'left' | 'right' | 'wheel' | 'back' | 'forward'; keys?: string[] }
  | { type: 'double_click'; x: number; y: number; keys?: string[] }
  | { type: 'drag'; path: Array<{ x: number; y: number }> }
  | { type: 'keypress'; keys: string[] }
  | { type: 'move'; x: number; y: number }
  | { type: 'scroll'; x: number; y: number; scroll_x: number; scroll_y: number; keys?: string[] }
  | { type: 'type'; text: string }
  | { type: 'wait' }
  | { type: 'screenshot' };

/** The body: a computer_call as the model sent it (its `action` or batched `actions`). */
export interface OpenAIComputerCall {
  action?: OpenAIComputerAction;
  actions?: OpenAIComputerAction[];
  call_id?: string;
  type?: 'computer_call';
}

/** What to send back as the computer_call_output item. */
export interface OpenAIComputerCallOutput {
  type: 'computer_call_output';
  call_id?: string;
  output: { type: 'computer_screenshot'; image_url: string };
}

/** A Gemini FunctionCall as the model sent it; x, y on the 0-999 grid. */
export interface GeminiFunctionCall {
  name: string;
  args?: Record<string, unknown>;
  id?: string;
}

/** The FunctionResponse to send back: the screenshot as inline data, or an error the model can read. */
export interface GeminiFunctionResponse {
  name: string;
  id?: string;
  response: { url?: string; error?: string };
  parts?: Array<{ inlineData: { mimeType: string; data: string } }>;
}
