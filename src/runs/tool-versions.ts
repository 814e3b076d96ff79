import type { BetaToolUnion } from '@anthropic-ai/sdk/resources/beta/messages/messages';

export const TOOL_VERSIONS = ['computer_20241022', 'computer_20250124', 'computer_20251124'] as const;
export type ToolVersion = (typeof TOOL_VERSIONS)[number];

/** What the loop sends for one tool version: the beta flag and the three tool definitions. */
export interface ToolSet {
  beta: string;
  tools: BetaToolUnion[];
  /** The text editor's name in this version: tool_use blocks name it so. */
  editorName: 'str_replace_editor' | 'str_replace_based_edit_tool';
}

/**
 * The tool groups of Anthropic's reference loop (computer-use-demo tools/groups.py): each
 * computer tool version goes with one beta flag and one bash and text editor version. The
 * 2024 editor is named str_replace_editor; both names reach the same editor tool.
 */
export function toolSet(version: ToolVersion, screen: { width: number; height: number }): ToolSet {
  const display = { display_width_px: screen.width, display_height_px: screen.height };
  switch (version) {
    case 'computer_20241022':
      return {
        beta: 'computer-use-2024-10-22',
        editorName: 'str_replace_editor',
        tools: [
          { type: 'computer_20241022', name: 'computer', ...display },
          { type: 'bash_20241022', name: 'bash' },
          { type: 'text_editor_20241022', name: 'str_replace_editor' },
        ],
      };
    case 'computer_20250124':
      return {
        beta: 'computer-use-2025-01-24',
        editorName: 'str_replace_based_edit_tool',
        tools: [
          { type: 'computer_20250124', name: 'computer', ...display },
          { type: 'bash_20250124', name: 'bash' },
          { type: 'text_editor_20250728', name: 'str_replace_based_edit_tool' },
        ],
      };
    case 'computer_20251124':
      return {
        beta: 'computer-use-2025-11-24',
        editorName: 'str_replace_based_edit_tool',
        tools: [
          { type: 'computer_20251124', name: 'computer', ...display, enable_zoom: true },
          { type: 'bash_20250124', name: 'bash' },
          { type: 'text_editor_20250728', name: 'str_replace_based_edit_tool' },
        ],
      };
  }
}
