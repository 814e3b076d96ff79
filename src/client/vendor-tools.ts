import { DesktopMethods } from './desktop.js';
import type { GeminiFunctionCall, GeminiFunctionResponse, OpenAIComputerCall, OpenAIComputerCallOutput } from './vendor-types.js';

/**
 * Other vendors' computer-use calls as methods of a Sandbox: a loop on OpenAI's or Gemini's
 * API forwards the model's call as it came and sends the answer back as it is.
 *
 *   const output = await sandbox.openaiComputer(item);     // item: the computer_call
 *   input.push(output);                                      // its computer_call_output
 *   const response = await sandbox.geminiComputer(part.functionCall);
 *   contents.push({ role: 'user', parts: [{ functionResponse: response }] });
 */
export abstract class VendorToolMethods extends DesktopMethods {
  /** An OpenAI computer_call (its action or batched actions); x, y in the size of info.tools.openai. */
  async openaiComputer(call: OpenAIComputerCall): Promise<OpenAIComputerCallOutput> {
    return this.client.json('POST', `/v1/sessions/${encodeURIComponent(this.id)}/tools/openai-computer`, call);
  }

  /** A Gemini computer-use FunctionCall (0-999 grid); a mistake comes back as response.error. */
  async geminiComputer(call: GeminiFunctionCall): Promise<GeminiFunctionResponse> {
    return this.client.json('POST', `/v1/sessions/${encodeURIComponent(this.id)}/tools/gemini-computer`, call);
  }
}
