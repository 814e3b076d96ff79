import { z } from 'zod';
import { ACTIONS, MAX_DURATION_SECONDS, MAX_TYPE_LENGTH, SCROLL_DIRECTIONS } from '../computer/actions.js';
import { SESSION_ID_PATTERN } from '../network/names.js';
import { SNAPSHOT_ID_PATTERN } from '../snapshots/snapshot-names.js';

/**
 * The input schemas of the MCP tools (tools.ts). They are what an MCP client shows the model
 * and what the SDK checks before a handler runs: a mismatch is a tool error (isError) naming
 * the field. They are a first, shape-level check only: every input then goes to the same
 * orchestrator route as any other client's, whose checks (coordinates in the model's space,
 * key names against the keysym table, paths) are the authoritative ones. Objects are strict,
 * so a misspelt field is refused rather than silently dropped.
 */

/**
 * The session id's own pattern, not any string: the id is put in a URL path, and a `..` or a
 * `/` there would name another route (URL normalisation) instead of failing.
 */
export const sandboxId = z
  .string()
  .regex(SESSION_ID_PATTERN, 'a sandbox id is 10 characters of a-z and 0-9, as sandbox_create or sandbox_list gives it')
  .describe('The sandbox, as sandbox_create or sandbox_list gives it');

/** Largest file moved by upload_file and download_file (decoded bytes). */
export const MCP_MAX_FILE_BYTES = 512 * 1024;

const point = z.tuple([z.number().int().min(0), z.number().int().min(0)]);
const absolutePath = z.string().min(1).max(4096).startsWith('/', 'the path must be absolute (start with /)');

export const createShape = {
  template: z.string().min(1).max(64).optional().describe("The template to boot (default: the orchestrator's, e.g. desktop or minimal)"),
  width: z.number().int().min(320).max(3840).optional().describe("Screen width in pixels (default: the template's)"),
  height: z.number().int().min(320).max(3840).optional().describe("Screen height in pixels (default: the template's)"),
  timeout_seconds: z.number().int().min(10).max(86_400).optional().describe('Idle timeout: the sandbox is destroyed after this long unused (default 300)'),
  snapshot: z
    .string()
    .regex(SNAPSHOT_ID_PATTERN, 'a snapshot id is snap- and 16 characters of a-z and 0-9, as sandbox_snapshot or snapshot_list gives it')
    .optional()
    .describe("Start from this snapshot (sandbox_snapshot) instead of booting: a fork with its own keys; template and screen are the snapshot's"),
};
export const createInput = z.strictObject(createShape);

export const noInput = z.strictObject({});
export const sandboxOnlyInput = z.strictObject({ sandbox_id: sandboxId });

export const snapshotInput = z.strictObject({
  sandbox_id: sandboxId,
  name: z.string().min(1).max(63).optional().describe("A name for it (letters, digits, '-', '_', '.'); unique among your snapshots"),
});

export const snapshotIdInput = z.strictObject({
  snapshot_id: z
    .string()
    .regex(SNAPSHOT_ID_PATTERN, 'a snapshot id is snap- and 16 characters of a-z and 0-9')
    .describe('The snapshot, as sandbox_snapshot or snapshot_list gives it'),
});

export const pauseInput = z.strictObject({
  sandbox_id: sandboxId,
  mode: z
    .enum(['memory', 'disk', 'auto'])
    .optional()
    .describe(
      'memory: frozen in place (no CPU, RAM kept); disk: state written to disk where the runtime does it; auto (default): disk where available, else memory',
    ),
});

export const screenshotInput = z.strictObject({
  sandbox_id: sandboxId,
  format: z.enum(['png', 'jpeg', 'webp']).optional().describe("Image format (default: the sandbox's, png unless set at create)"),
  scaled: z
    .boolean()
    .optional()
    .describe('As the model sees the screen, in the coordinate space of the computer tool (default true); false: the real screen size'),
});

/**
 * The computer-use tool input (shared/computer-use/ACTIONS.md) plus the sandbox: one tool
 * rather than one per action, see docs/mcp.md.
 */
export const computerInput = z.strictObject({
  sandbox_id: sandboxId,
  action: z.enum(ACTIONS).describe('The computer-use action'),
  coordinate: point.optional().describe("[x, y] in the screenshot's (scaled) pixels: mouse_move, left_click_drag (end), clicks and scroll (move first)"),
  start_coordinate: point.optional().describe('[x, y]: where left_click_drag starts'),
  text: z
    .string()
    .max(MAX_TYPE_LENGTH)
    .optional()
    .describe('type: literal text; key: a key combo such as ctrl+s or Return; hold_key: the key; scroll: a modifier to hold'),
  key: z.string().max(64).optional().describe('clicks: a modifier held during the click, e.g. shift'),
  scroll_direction: z.enum(SCROLL_DIRECTIONS).optional(),
  scroll_amount: z.number().int().min(0).max(100).optional().describe('scroll: wheel clicks'),
  duration: z.number().min(0).max(MAX_DURATION_SECONDS).optional().describe('hold_key, wait: seconds'),
  region: z
    .tuple([z.number().int().min(0), z.number().int().min(0), z.number().int().min(0), z.number().int().min(0)])
    .optional()
    .describe('zoom: [x0, y0, x1, y1]'),
});

export const bashInput = z.strictObject({
  sandbox_id: sandboxId,
  command: z.string().max(100_000).optional().describe("A command for the sandbox's persistent bash shell"),
  restart: z.boolean().optional().describe('true: restart the shell instead'),
});

export const editorInput = z.strictObject({
  sandbox_id: sandboxId,
  command: z.enum(['view', 'create', 'str_replace', 'insert']),
  path: absolutePath,
  view_range: z.tuple([z.number().int(), z.number().int()]).optional().describe('view: [first line, last line] (-1: to the end)'),
  file_text: z.string().optional().describe('create: the whole file'),
  old_str: z.string().optional().describe('str_replace: text that occurs exactly once'),
  new_str: z.string().optional().describe('str_replace: its replacement; insert: unused'),
  insert_line: z.number().int().min(0).optional().describe('insert: the line after which to insert (0: at the top)'),
  insert_text: z.string().optional().describe('insert: the text'),
});

/** Base64 of at most MCP_MAX_FILE_BYTES bytes: the length is bounded before anything is decoded. */
const base64 = z
  .string()
  .max(Math.ceil(MCP_MAX_FILE_BYTES / 3) * 4, `at most ${MCP_MAX_FILE_BYTES} bytes (base64 encoded)`)
  .regex(/^[A-Za-z0-9+/]*={0,2}$/, 'must be base64 (A-Z a-z 0-9 + / and = padding)');

export const uploadInput = z.strictObject({
  sandbox_id: sandboxId,
  path: absolutePath.describe('Absolute path in the sandbox; the file is replaced atomically'),
  content_base64: base64.describe(`The file's bytes, base64 (at most ${MCP_MAX_FILE_BYTES} bytes)`),
  mode: z
    .string()
    .regex(/^0?[0-7]{3}$/, 'octal permissions such as 644 or 0755')
    .optional()
    .describe('Permissions, octal (default: those of the file replaced, else 644)'),
});

export const downloadInput = z.strictObject({
  sandbox_id: sandboxId,
  path: absolutePath.describe('Absolute path of a file in the sandbox'),
});

export const DESKTOP_ACTIONS = ['open', 'launch', 'list_windows', 'focus_window', 'close_window', 'get_clipboard', 'set_clipboard'] as const;

export const desktopInput = z.strictObject({
  sandbox_id: sandboxId,
  action: z.enum(DESKTOP_ACTIONS),
  target: z.string().min(1).max(2048).optional().describe('open: a URL (http, https, file, mailto) or an absolute path'),
  app: z.string().min(1).max(255).optional().describe('launch: a desktop-file id such as debian-xterm or firefox-esr'),
  window_id: z.number().int().min(1).max(4_294_967_295).optional().describe('focus_window, close_window: an id from list_windows'),
  text: z
    .string()
    .max(1024 * 1024)
    .optional()
    .describe('set_clipboard: the text'),
});
