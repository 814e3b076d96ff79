import type { ImageMediaType, ScreenshotFormatOptions } from './screenshot-format.js';
import type { RecordingStatus } from './recording.js';
import type { VendorTools } from './vendor-types.js';

/** The shapes the API answers with and takes: sessions, tool inputs, tool results. */

/** A session as the API describes it. */
export interface SessionInfo {
  id: string;
  state: 'creating' | 'ready' | 'destroying' | 'destroyed' | 'failed';
  runtime: 'container' | 'qemu' | 'firecracker';
  /** The template its sandbox booted. */
  template: string;
  display: { width: number; height: number };
  /** The tool definition to pass to the Messages API as is (in the model's space). */
  computerTool: {
    type: 'computer_20241022' | 'computer_20250124' | 'computer_20251124';
    name: 'computer';
    display_width_px: number;
    display_height_px: number;
    enable_zoom?: boolean;
  };
  /** Each vendor's tool definition for this session (anthropic is computerTool). */
  tools?: VendorTools;
  /** The default screenshot format chosen at create. */
  screenshot?: ScreenshotFormatOptions;
  /** Idle timeout: the session ends this long after its last activity. */
  timeoutSeconds?: number;
  /** Maximum lifetime, counted from createdAt. */
  maxLifetimeSeconds?: number;
  metadata?: Record<string, unknown>;
  /**
   * The guest network policy chosen at create time; `transport`: what carries the
   * orchestrator's control channel; `interfaces`: ['lo'] alone for a sandbox with no NIC.
   */
  network?: { egress: boolean; transport?: 'tcp' | 'unix'; interfaces?: string[] };
  /** The tenant that owns it (the API key's; `local` without keys). */
  tenant?: string;
  createdAt: string;
  /** When the session ends unless it is used again (never after lifetimeEndsAt). */
  expiresAt: string;
  /** When the session ends whatever happens. */
  lifetimeEndsAt?: string;
  error?: string;
  /** Why the session ended. */
  endReason?: 'deleted' | 'idle_timeout' | 'max_lifetime' | 'failed' | 'shutdown' | 'node_lost';
  /** Its screen recording, when it was recorded. */
  recording?: RecordingStatus;
}

/** What PATCH /v1/sessions/:id changes: at least one of them. */
export interface TimeoutUpdate {
  timeoutSeconds?: number;
  maxLifetimeSeconds?: number;
}

/** A template as GET /v1/templates lists it. */
export interface TemplateInfo {
  name: string;
  kind: 'built-in' | 'user';
  base: string | null;
  built: boolean;
  sizeBytes: number | null;
  builtAt: string | null;
  screen: { width: number; height: number } | null;
}

export interface CreateOptions {
  /** The template to boot (default: the server's); see listTemplates(). */
  template?: string;
  width?: number;
  height?: number;
  /** The screen size the model sees: 'auto' (default), 'none', or a size. */
  scaling?: 'auto' | 'none' | { width: number; height: number };
  toolVersion?: 'computer_20241022' | 'computer_20250124' | 'computer_20251124';
  /** The session's default screenshot format (png unless set). */
  screenshot?: ScreenshotFormatOptions;
  /** Idle timeout in seconds (server default 300). */
  timeoutSeconds?: number;
  /** Maximum lifetime in seconds: at most, and by default, the server's maximum (3600). */
  maxLifetimeSeconds?: number;
  metadata?: Record<string, unknown>;
  /**
   * The guest network policy. The sandbox never reaches the host, the orchestrator, other
   * sandboxes or private ranges; `egress: true` lets it reach the internet (NAT). Default off.
   */
  network?: { egress?: boolean };
  /** Every call is stored (sandbox.trajectory()); typed text as its length unless keepTypedText. */
  trajectory?: { keepTypedText?: boolean };
  /** Record the screen to a video from the start (Sandbox.downloadRecording). */
  record?: boolean;
}

/** A computer-use tool input, as a model sends it. */
export interface ComputerToolInput {
  action: string;
  coordinate?: [number, number];
  start_coordinate?: [number, number];
  text?: string;
  key?: string;
  scroll_direction?: 'up' | 'down' | 'left' | 'right';
  scroll_amount?: number;
  duration?: number;
  region?: [number, number, number, number];
  [field: string]: unknown;
}

/** A bash_20250124 tool_use input. */
export interface BashToolInput {
  command?: string;
  restart?: boolean;
  [field: string]: unknown;
}

/** A text_editor_20250728 (str_replace_based_edit_tool) tool_use input. */
export interface EditorToolInput {
  command: 'view' | 'create' | 'str_replace' | 'insert' | (string & {});
  path: string;
  view_range?: [number, number];
  file_text?: string;
  old_str?: string;
  new_str?: string;
  insert_line?: number;
  insert_text?: string;
  [field: string]: unknown;
}

/** The text of a tool result (its text blocks joined), for callers that only read it. */
export function resultText(result: ToolResult): string {
  return result.content.flatMap((block) => (block.type === 'text' ? [block.text] : [])).join('\n');
}

/** The tool_result content of the Messages API, as the tool endpoints answer. */
export interface ToolResult {
  content: Array<
    { type: 'text'; text: string } | { type: 'image'; source: { type: 'base64'; media_type: ImageMediaType; data: string } }
  >;
  is_error: boolean;
}

export interface ActionResult {
  action: string;
  output?: string;
  cursor?: { x: number; y: number };
  image?: { mediaType: string; data: string };
  settleMs?: number;
  durationMs: number;
}
