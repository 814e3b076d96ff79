import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import type { CallToolResult, ToolAnnotations } from '@modelcontextprotocol/sdk/types.js';
import { Sandbox, type SandboxClient } from '../client/index.js';
import { download, upload } from './files.js';
import { killProcess, listFiles, listFilesInput, processKillInput, processOutput, processOutputInput, processStartInput, startProcess } from './processes.js';
import { asToolResult, fromToolResult, imageMimeType, jsonResult, textResult } from './results.js';
import {
  bashInput,
  computerInput,
  createInput,
  desktopInput,
  downloadInput,
  editorInput,
  MCP_MAX_FILE_BYTES,
  noInput,
  sandboxOnlyInput,
  pauseInput,
  snapshotIdInput,
  snapshotInput,
  screenshotInput,
  uploadInput,
} from './schemas.js';
import type { z } from 'zod';

/**
 * The MCP server: sandboxes as MCP tools. Every tool is a call of the orchestrator's HTTP API
 * through our client, for both transports: `sbx mcp` (stdio) talks to a running orchestrator
 * with its key; /mcp on the orchestrator hands the same calls to its own routes with the
 * caller's key (api/routes/mcp.ts). So a tool does exactly what the route does: the same
 * checks, the same tenant scope, the same trajectory, the same limits.
 */
export const MCP_SERVER_NAME = 'sandbox-orchestrator';
/** The package's version, as the API description gives it. */
const MCP_SERVER_VERSION = '0.1.0';

export function createMcpServer(client: SandboxClient): McpServer {
  const server = new McpServer({ name: MCP_SERVER_NAME, version: MCP_SERVER_VERSION }, { capabilities: { tools: {} } });
  const register = <S extends z.ZodObject>(
    name: string,
    description: string,
    inputSchema: S,
    run: (input: z.infer<S>) => Promise<CallToolResult>,
    annotations: ToolAnnotations = {},
  ) => {
    // The SDK's callback type cannot be resolved for a generic schema (it is, for each
    // concrete one below): the handler takes exactly what the schema parsed.
    server.registerTool(name, { description, inputSchema, annotations }, ((input: z.infer<S>) => asToolResult(() => run(input))) as never);
  };
  // Hints MCP clients use to decide what to confirm with the user first.
  const readOnly: ToolAnnotations = { readOnlyHint: true, openWorldHint: false };
  // The handle needs only the id: its methods build the routes' paths.
  const sandbox = (id: string) => new Sandbox(client, { id } as Sandbox['info']);

  register(
    'sandbox_create',
    'Create a disposable Linux desktop sandbox; returns its id, screen size and computer tool definition.',
    createInput,
    async (input) => {
      const created = await client.create({
        ...(input.template === undefined ? {} : { template: input.template }),
        ...(input.width === undefined ? {} : { width: input.width }),
        ...(input.height === undefined ? {} : { height: input.height }),
        ...(input.timeout_seconds === undefined ? {} : { timeoutSeconds: input.timeout_seconds }),
        ...(input.snapshot === undefined ? {} : { snapshot: input.snapshot }),
        metadata: { createdBy: 'mcp' },
      });
      return jsonResult(created.info);
    },
  );

  register('sandbox_list', 'List your live sandboxes.', noInput, async () => jsonResult(await client.list()), readOnly);

  register(
    'sandbox_destroy',
    'Destroy a sandbox (idempotent).',
    sandboxOnlyInput,
    async ({ sandbox_id }) => {
      const info = await client.destroy(sandbox_id);
      return textResult(`${info.id} ${info.state}`);
    },
    { destructiveHint: true, idempotentHint: true, openWorldHint: false },
  );

  register(
    'sandbox_pause',
    'Pause a sandbox: every process stops where it is (no CPU) until it is resumed; any later tool call resumes it.',
    pauseInput,
    async ({ sandbox_id, mode }) => {
      const info = await client.pause(sandbox_id, mode);
      return textResult(`${info.id} ${info.state} (${info.paused?.mode ?? 'running'})`);
    },
    { idempotentHint: false, openWorldHint: false },
  );

  register(
    'sandbox_resume',
    'Resume a paused sandbox: the same windows, files and screen.',
    sandboxOnlyInput,
    async ({ sandbox_id }) => {
      const info = await client.resume(sandbox_id);
      return textResult(`${info.id} ${info.state}`);
    },
    { openWorldHint: false },
  );

  register(
    'sandbox_snapshot',
    "Save a running sandbox's desktop (memory and disk); it pauses for a moment and runs on. sandbox_create with its id starts new sandboxes from it.",
    snapshotInput,
    async ({ sandbox_id, name }) => jsonResult(await client.snapshots.create(sandbox_id, name === undefined ? {} : { name })),
    { idempotentHint: false, openWorldHint: false },
  );

  register('snapshot_list', 'List your snapshots.', noInput, async () => jsonResult(await client.snapshots.list()), readOnly);

  register(
    'snapshot_delete',
    'Delete a snapshot and its files (sandboxes started from it go on).',
    snapshotIdInput,
    async ({ snapshot_id }) => jsonResult(await client.snapshots.delete(snapshot_id)),
    { destructiveHint: true, openWorldHint: false },
  );

  register(
    'screenshot',
    "An image of the sandbox's screen.",
    screenshotInput,
    async ({ sandbox_id, format, scaled }) => {
      const image = await client.screenshot(sandbox_id, { scaled: scaled ?? true, ...(format ? { format } : {}) });
      return { content: [{ type: 'image', data: image.toString('base64'), mimeType: imageMimeType(image) }] };
    },
    readOnly,
  );

  register(
    'computer',
    "Use the sandbox's mouse and keyboard: the computer-use tool's actions (key, type, mouse_move, left_click, left_click_drag, right_click, " +
      'middle_click, double_click, triple_click, left_mouse_down, left_mouse_up, scroll, hold_key, wait, screenshot, cursor_position, zoom). ' +
      "Coordinates are in the screenshot tool's (scaled) pixels. Returns a screenshot after the action.",
    computerInput,
    async ({ sandbox_id, ...input }) => fromToolResult(await client.executeToolUse(sandbox_id, input, 'computer')),
  );

  register(
    'bash',
    "Run a command in the sandbox's persistent bash shell (as the desktop user); restart: true restarts it.",
    bashInput,
    async ({ sandbox_id, ...input }) => fromToolResult(await client.executeToolUse(sandbox_id, input, 'bash')),
  );

  register(
    'text_editor',
    'View, create and edit files in the sandbox (the str_replace_based_edit_tool: view, create, str_replace, insert; absolute paths).',
    editorInput,
    async ({ sandbox_id, ...input }) => fromToolResult(await client.executeToolUse(sandbox_id, input, 'str_replace_based_edit_tool')),
  );

  register(
    'upload_file',
    `Write a file into the sandbox from base64 (at most ${MCP_MAX_FILE_BYTES / 1024} KiB).`,
    uploadInput,
    ({ sandbox_id, path, content_base64, mode }) => upload(client, sandbox_id, path, content_base64, mode),
  );

  register(
    'download_file',
    `Read a file of the sandbox, as base64 (at most ${MCP_MAX_FILE_BYTES / 1024} KiB).`,
    downloadInput,
    ({ sandbox_id, path }) => download(client, sandbox_id, path),
    readOnly,
  );

  register(
    'process_start',
    'Start a process in the sandbox (argv, or a shell command as cmd), as the desktop user; returns its pid. Read its output with process_output.',
    processStartInput,
    (input) => startProcess(client, input),
  );
  register(
    'process_output',
    "A process's output from a byte offset (0 first, then next_from), waiting up to wait_seconds for some; says when it exited and how.",
    processOutputInput,
    (input) => processOutput(client, input),
    readOnly,
  );
  register('process_kill', 'Kill a process (SIGTERM, then SIGKILL after a grace).', processKillInput, (input) => killProcess(client, input), {
    destructiveHint: true,
    openWorldHint: false,
  });
  register(
    'list_files',
    'List a directory of the sandbox: name, type, size, mode, mtime of each entry (depth 1-5).',
    listFilesInput,
    (input) => listFiles(client, input),
    readOnly,
  );

  register(
    'desktop',
    'Desktop actions: open a URL or file in its default application, launch an application, list/focus/close windows, get/set the clipboard.',
    desktopInput,
    async (input) => desktopAction(sandbox(input.sandbox_id), input),
  );
  return server;
}

/** Which field a desktop action needs, said as a tool error when it is missing. */
function need<T>(value: T | undefined, field: string, action: string): T {
  if (value === undefined) throw new MissingFieldError(`${action} needs ${field}`);
  return value;
}

class MissingFieldError extends Error {}

async function desktopAction(box: Sandbox, input: z.infer<typeof desktopInput>): Promise<CallToolResult> {
  try {
    switch (input.action) {
      case 'open':
        await box.open(need(input.target, 'target', input.action));
        return textResult(`opened ${input.target}`);
      case 'launch':
        return jsonResult(await box.launch(need(input.app, 'app', input.action)));
      case 'list_windows':
        return jsonResult(await box.windows());
      case 'focus_window':
        return jsonResult({ focused: await box.focusWindow(need(input.window_id, 'window_id', input.action)) });
      case 'close_window':
        return jsonResult({ closed: await box.closeWindow(need(input.window_id, 'window_id', input.action)) });
      case 'get_clipboard':
        return textResult(await box.clipboard());
      case 'set_clipboard':
        await box.setClipboard(need(input.text, 'text', input.action));
        return textResult('clipboard set');
    }
  } catch (err) {
    if (err instanceof MissingFieldError) return { content: [{ type: 'text', text: err.message }], isError: true };
    throw err;
  }
}
