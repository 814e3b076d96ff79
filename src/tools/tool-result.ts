import type { EncodedImage, ImageMediaType } from '../computer/screenshot-format.js';

/**
 * The tool_result content of the Messages API: what an agent loop sends back to the model
 * after a tool_use. Every tool endpoint answers in this shape, so a loop can forward it as is.
 */
export type ToolContent = { type: 'text'; text: string } | { type: 'image'; source: { type: 'base64'; media_type: ImageMediaType; data: string } };

export interface ToolResult {
  content: ToolContent[];
  is_error: boolean;
}

export function textResult(text: string): ToolResult {
  return { content: [{ type: 'text', text }], is_error: false };
}

/** A tool error: the model reads the message and can correct itself. */
export function errorResult(message: string): ToolResult {
  return { content: [{ type: 'text', text: message }], is_error: true };
}

export function imageContent(image: EncodedImage): ToolContent {
  return { type: 'image', source: { type: 'base64', media_type: image.mediaType, data: image.data.toString('base64') } };
}

/** JSON schema of a tool result, for the OpenAPI document. */
export const toolResultSchema = {
  $id: 'ToolResult',
  type: 'object',
  required: ['content', 'is_error'],
  properties: {
    content: {
      type: 'array',
      items: {
        type: 'object',
        required: ['type'],
        properties: {
          type: { type: 'string', enum: ['text', 'image'] },
          text: { type: 'string' },
          source: {
            type: 'object',
            properties: { type: { type: 'string' }, media_type: { type: 'string' }, data: { type: 'string' } },
          },
        },
      },
    },
    is_error: { type: 'boolean' },
  },
} as const;
