import type { FastifyInstance } from 'fastify';
import { DesktopActions } from '../../computer/desktop-actions/desktop-actions.js';
import { MAX_TARGET_LENGTH, MAX_CLIPBOARD_BYTES, OPEN_SCHEMES } from '../../computer/desktop-actions/requests.js';
import type { DesktopSessions } from '../../sessions/ports.js';
import { recordedCall } from '../../sessions/trajectory/recorded-call.js';
import type { TrajectoryRecorder } from '../../sessions/trajectory/recorder.js';
import { SMALL_BODY_LIMIT_BYTES } from '../limits.js';
import { sessionIdParams } from '../schemas.js';

interface IdParams {
  id: string;
}
interface WindowParams extends IdParams {
  windowId: string;
}

const errors = {
  400: { $ref: 'Error#' },
  404: { $ref: 'Error#' },
  409: { $ref: 'Error#' },
  410: { $ref: 'Error#' },
  413: { $ref: 'Error#' },
  422: { $ref: 'Error#' },
  502: { $ref: 'Error#' },
};

const windowParams = {
  type: 'object',
  required: ['id', 'windowId'],
  properties: {
    id: sessionIdParams.properties.id,
    windowId: { type: 'string', pattern: '^[1-9][0-9]{0,9}$', description: 'A window id from the window list' },
  },
} as const;

const windowSchema = {
  type: 'object',
  required: ['id', 'title', 'app', 'instance', 'x', 'y', 'width', 'height', 'focused'],
  properties: {
    id: { type: 'integer', description: 'The X window id: what focus and close take' },
    title: { type: 'string' },
    app: { type: 'string', description: "WM_CLASS's class, e.g. XTerm" },
    instance: { type: 'string', description: "WM_CLASS's instance, e.g. xterm" },
    x: { type: 'integer' },
    y: { type: 'integer' },
    width: { type: 'integer' },
    height: { type: 'integer' },
    focused: { type: 'boolean', description: 'The active window (_NET_ACTIVE_WINDOW)' },
  },
} as const;

/**
 * Clipboard text may be up to 1 MiB of UTF-8; as JSON it can be longer (escapes), so the
 * route allows twice that, still far below anything that costs the host.
 */
const CLIPBOARD_BODY_LIMIT_BYTES = 2 * MAX_CLIPBOARD_BYTES + 64 * 1024;

/**
 * /v1/sessions/:id/desktop/...: desktop actions beyond raw input (open, launch, windows,
 * clipboard, screen size), each one request to the session's long-lived desktop helper in
 * the guest, as data on its stdin (computer/desktop-actions). Scoped to the tenant and rate-limited like
 * every session route (server.ts installs both for every /v1/sessions/:id route). Each call
 * is a step of the session's trajectory (tool `desktop`, action `open`, `launch`, `windows`,
 * `focus`, `close`, `clipboard`, `set_clipboard`, `screen`): clipboard text, both ways, is
 * typed text there (stored as its length unless the session keeps typed text).
 */
export async function desktopActionRoutes(app: FastifyInstance, opts: { manager: DesktopSessions; trajectory?: TrajectoryRecorder }): Promise<void> {
  const { manager } = opts;
  // Refused (409 human_in_control) while a person has taken the session over, as computer
  // actions are: checked before anything runs, reads included (the agent waits for hand-back).
  const actions = (id: string) => {
    manager.checkAgentControl(id);
    return manager.attachment(id, 'desktop-actions', (ctx) => DesktopActions.attach(ctx, manager.displayOf(id), manager.displayStartedBySession(id)));
  };
  /** Runs one desktop action of a session as a step of its trajectory; `typed`: its answer is the clipboard's text. */
  const step = <T>(
    id: string,
    input: { action: string } & Record<string, unknown>,
    work: (desktop: DesktopActions) => Promise<T>,
    typed?: (answer: T) => string,
  ) =>
    recordedCall(
      opts.trajectory,
      { sessionId: id, tool: 'desktop', input },
      async () => work(await actions(id)),
      (answer, durationMs) => (typed ? { durationMs, output: typed(answer), outputIsTyped: true } : { durationMs, output: JSON.stringify(answer) }),
    );

  app.post<{ Params: IdParams; Body: { target: string } }>(
    '/v1/sessions/:id/desktop/open',
    {
      bodyLimit: SMALL_BODY_LIMIT_BYTES,
      schema: {
        summary: "Open a URL or a file in the sandbox's default application for it",
        description:
          `target: a URL (${OPEN_SCHEMES.join(', ')}; no spaces or control characters) or an absolute path, at most ${MAX_TARGET_LENGTH} characters. ` +
          'It reaches the application as one argument, as given. 422 when the guest has no application for it or the file does not exist.',
        tags: ['desktop'],
        params: sessionIdParams,
        body: {
          type: 'object',
          required: ['target'],
          additionalProperties: false,
          properties: { target: { type: 'string', minLength: 1, maxLength: MAX_TARGET_LENGTH } },
        },
        response: { 200: { type: 'object', properties: { target: { type: 'string' } } }, ...errors },
      },
    },
    async (request) => step(request.params.id, { action: 'open', target: request.body.target }, (d) => d.open(request.body.target)),
  );

  app.post<{ Params: IdParams; Body: { app: string } }>(
    '/v1/sessions/:id/desktop/launch',
    {
      bodyLimit: SMALL_BODY_LIMIT_BYTES,
      schema: {
        summary: 'Start an application by its desktop-file id (e.g. debian-xterm), detached',
        description: "404 app_not_found when no such .desktop file is in the guest's applications directories.",
        tags: ['desktop'],
        params: sessionIdParams,
        body: {
          type: 'object',
          required: ['app'],
          additionalProperties: false,
          properties: { app: { type: 'string', minLength: 1, maxLength: 255 } },
        },
        response: { 200: { type: 'object', properties: { app: { type: 'string' }, file: { type: 'string' } } }, ...errors },
      },
    },
    async (request) => step(request.params.id, { action: 'launch', app: request.body.app }, (d) => d.launch(request.body.app)),
  );

  app.get<{ Params: IdParams }>(
    '/v1/sessions/:id/desktop/windows',
    {
      schema: {
        summary: "The desktop's top-level windows, as the window manager lists them",
        tags: ['desktop'],
        params: sessionIdParams,
        response: { 200: { type: 'object', properties: { windows: { type: 'array', items: windowSchema } } }, ...errors },
      },
    },
    async (request) => step(request.params.id, { action: 'windows' }, async (d) => ({ windows: await d.windows() })),
  );

  app.post<{ Params: WindowParams }>(
    '/v1/sessions/:id/desktop/windows/:windowId/focus',
    {
      schema: {
        summary: 'Make a window the active one (raised, with the keyboard focus)',
        description: 'focused: whether the window manager made it active within 2 s.',
        tags: ['desktop'],
        params: windowParams,
        response: { 200: { type: 'object', properties: { id: { type: 'integer' }, focused: { type: 'boolean' } } }, ...errors },
      },
    },
    async (request) => step(request.params.id, { action: 'focus', windowId: request.params.windowId }, (d) => d.focus(request.params.windowId)),
  );

  app.post<{ Params: WindowParams }>(
    '/v1/sessions/:id/desktop/windows/:windowId/close',
    {
      schema: {
        summary: 'Ask a window to close, as its close button would',
        description: 'closed: whether it was gone within 2 s (an application may ask first, e.g. to save).',
        tags: ['desktop'],
        params: windowParams,
        response: { 200: { type: 'object', properties: { id: { type: 'integer' }, closed: { type: 'boolean' } } }, ...errors },
      },
    },
    async (request) => step(request.params.id, { action: 'close', windowId: request.params.windowId }, (d) => d.close(request.params.windowId)),
  );

  app.get<{ Params: IdParams }>(
    '/v1/sessions/:id/desktop/clipboard',
    {
      schema: {
        summary: "The text on the sandbox's clipboard (the CLIPBOARD selection)",
        description: `413 clipboard_too_large when it holds more than ${MAX_CLIPBOARD_BYTES} bytes. An empty clipboard is "".`,
        tags: ['desktop'],
        params: sessionIdParams,
        response: { 200: { type: 'object', properties: { text: { type: 'string' } } }, ...errors },
      },
    },
    async (request) =>
      step(
        request.params.id,
        { action: 'clipboard' },
        async (d) => ({ text: await d.clipboard() }),
        (answer) => answer.text,
      ),
  );

  app.put<{ Params: IdParams; Body: { text: string } }>(
    '/v1/sessions/:id/desktop/clipboard',
    {
      bodyLimit: CLIPBOARD_BODY_LIMIT_BYTES,
      schema: {
        summary: "Put text on the sandbox's clipboard (the CLIPBOARD selection)",
        description: `text: at most ${MAX_CLIPBOARD_BYTES} bytes of UTF-8.`,
        tags: ['desktop'],
        params: sessionIdParams,
        body: {
          type: 'object',
          required: ['text'],
          additionalProperties: false,
          properties: { text: { type: 'string' } },
        },
        response: { 200: { type: 'object', properties: { bytes: { type: 'integer' } } }, ...errors },
      },
    },
    async (request) => step(request.params.id, { action: 'set_clipboard', text: request.body.text }, (d) => d.setClipboard(request.body.text)),
  );

  app.get<{ Params: IdParams }>(
    '/v1/sessions/:id/desktop/screen',
    {
      schema: {
        summary: "The guest's screen size in pixels, as its X server reports it",
        tags: ['desktop'],
        params: sessionIdParams,
        response: { 200: { type: 'object', properties: { width: { type: 'integer' }, height: { type: 'integer' } } }, ...errors },
      },
    },
    async (request) => step(request.params.id, { action: 'screen' }, (d) => d.screen()),
  );
}
