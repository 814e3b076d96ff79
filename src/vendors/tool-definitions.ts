import type { Size } from '../computer/scaling.js';

/**
 * The tool definitions other vendors' APIs take, for one session, ready to pass as they are
 * (the Anthropic one is the session view's computerTool).
 */

/**
 * OpenAI's computer tool in the Responses API. The display is the session's model space:
 * screenshots come at that size and the model's x, y are read in it (openai.ts).
 */
export interface OpenAIToolDefinition {
  type: 'computer_use_preview';
  display_width: number;
  display_height: number;
  environment: 'linux';
}

export function openaiToolDefinition(model: Size): OpenAIToolDefinition {
  return { type: 'computer_use_preview', display_width: model.width, display_height: model.height, environment: 'linux' };
}

/**
 * Gemini's computer_use tool (a `Tool` of generateContent, as @google/genai spells it). It
 * has no size: Gemini points on a 0-999 grid of whatever screenshot it saw (gemini.ts).
 * ENVIRONMENT_BROWSER is the environment every Gemini computer-use model accepts; the
 * desktop's browser takes its browser-only calls.
 */
export interface GeminiToolDefinition {
  computerUse: { environment: 'ENVIRONMENT_BROWSER' };
}

export function geminiToolDefinition(): GeminiToolDefinition {
  return { computerUse: { environment: 'ENVIRONMENT_BROWSER' } };
}
