import type { CallToolResult } from '@modelcontextprotocol/sdk/types.js';
import { SandboxError, type ToolResult } from '../client/index.js';

/** Turning what the orchestrator answers into MCP tool results. */

export function textResult(text: string): CallToolResult {
  return { content: [{ type: 'text', text }] };
}

export function jsonResult(value: unknown): CallToolResult {
  return textResult(JSON.stringify(value, null, 2));
}

/** A tool error the model can read and act on (isError), never a JSON-RPC error or a crash. */
export function errorResult(message: string): CallToolResult {
  return { content: [{ type: 'text', text: message }], isError: true };
}

/**
 * A Messages API tool_result (what the tool routes answer) as MCP content: its image blocks
 * become MCP image content with their media type, its text blocks text, is_error isError.
 */
export function fromToolResult(result: ToolResult): CallToolResult {
  const content: CallToolResult['content'] = result.content.map((block) =>
    block.type === 'text' ? { type: 'text', text: block.text } : { type: 'image', data: block.source.data, mimeType: block.source.media_type },
  );
  // MCP clients show an empty result as nothing at all; say that the call did its work.
  if (content.length === 0) content.push({ type: 'text', text: 'done' });
  return result.is_error ? { content, isError: true } : { content };
}

/** The MIME type of an encoded screenshot, by its first bytes (the sandbox's default format may be any). */
export function imageMimeType(image: Buffer): 'image/png' | 'image/jpeg' | 'image/webp' {
  if (image.subarray(0, 3).equals(Buffer.from([0xff, 0xd8, 0xff]))) return 'image/jpeg';
  if (image.toString('latin1', 0, 4) === 'RIFF' && image.toString('latin1', 8, 12) === 'WEBP') return 'image/webp';
  return 'image/png';
}

/**
 * Runs a tool's work; an error the orchestrator answered (unknown sandbox, bad input, limits)
 * becomes a tool error with its message and code. Anything else (the orchestrator cannot be
 * reached) too, said plainly: an MCP client shows it to the model and the user, and the
 * server goes on serving.
 */
export async function asToolResult(work: () => Promise<CallToolResult>): Promise<CallToolResult> {
  try {
    return await work();
  } catch (err) {
    if (err instanceof SandboxError) return errorResult(`${err.message} (${err.code}, HTTP ${err.status})`);
    const cause = err instanceof Error && err.cause instanceof Error ? `: ${err.cause.message}` : '';
    return errorResult(`the orchestrator could not be reached or failed: ${err instanceof Error ? err.message : String(err)}${cause}`);
  }
}
