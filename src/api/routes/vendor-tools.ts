import type { FastifyInstance } from 'fastify';
import { DesktopActions } from '../../computer/desktop-actions/desktop-actions.js';
import { AppNotFoundError, DesktopActionFailedError } from '../../computer/desktop-actions/answers.js';
import { DesktopError } from '../../computer/desktop.js';
import { Scaler } from '../../computer/scaling.js';
import type { EncodedImage } from '../../computer/screenshot-format.js';
import { InvalidRequestError } from '../../errors.js';
import type { ComputerActions, DesktopSessions, SessionDirectory } from '../../sessions/ports.js';
import type { ActionOutcome } from '../../sessions/session-actions.js';
import { recordedCall, type StepOutcome } from '../../sessions/trajectory/recorded-call.js';
import type { TrajectoryRecorder } from '../../sessions/trajectory/recorder.js';
import { ignoredText, objectOf, onlyFields } from '../../vendors/fields.js';
import { addressBarActions, translateGemini, type BrowserStep } from '../../vendors/gemini.js';
import type { ComputerAction } from '../../computer/actions.js';
import { openaiActionList, translateOpenAI } from '../../vendors/openai.js';
import { SMALL_BODY_LIMIT_BYTES } from '../limits.js';
import { sessionIdParams } from '../schemas.js';

type VendorSessions = ComputerActions & DesktopSessions & Pick<SessionDirectory, 'get'>;

const errors = { 400: { $ref: 'Error#' }, 404: { $ref: 'Error#' }, 409: { $ref: 'Error#' }, 410: { $ref: 'Error#' } };
/** Typed text may be 20,000 characters; as JSON escapes, several times that. */
const VENDOR_BODY_LIMIT_BYTES = 4 * SMALL_BODY_LIMIT_BYTES;
/** The desktop template's browser (its desktop-file id), what open_web_browser starts. */
const BROWSER_APP = 'firefox-esr';
/** A window of a web browser, by its WM_CLASS. */
const BROWSER_CLASS = /firefox|chromium|chrome|browser/i;
const CALL_ID = /^[A-Za-z0-9_-]{1,200}$/;

/**
 * POST /v1/sessions/:id/tools/openai-computer and /tools/gemini-computer: another vendor's
 * computer-use call, as the model sent it, translated into our own actions (src/vendors/)
 * and run by the same code as /actions; the answer is what that vendor's API takes back.
 * Each call is a step of the session's trajectory (tool `openai-computer` / `gemini-computer`),
 * its input as the model sent it with typed text masked (step-input.ts), the settled screen
 * as its screenshot; a call refused (400) or answered with an error is a step with its error.
 */
export async function vendorToolRoutes(app: FastifyInstance, opts: { manager: VendorSessions; trajectory?: TrajectoryRecorder }): Promise<void> {
  const { manager, trajectory } = opts;

  app.post<{ Params: { id: string }; Body: unknown }>(
    '/v1/sessions/:id/tools/openai-computer',
    {
      bodyLimit: VENDOR_BODY_LIMIT_BYTES,
      schema: {
        summary: "OpenAI's computer_call in (its action or batched actions), its computer_call_output out",
        description:
          "x, y are in the display size of the session view's tools.openai (its model space). All actions are checked before the first runs; " +
          'a bad one is a 400 naming it (e.g. actions[2].keys[0]). The screenshot is the settled screen after the last, as a PNG data URL.',
        tags: ['tools'],
        params: sessionIdParams,
        response: { 200: { type: 'object', additionalProperties: true }, ...errors },
      },
    },
    async (request) => {
      const { id } = request.params;
      const { outcome, callId } = await recordedCall(
        trajectory,
        { sessionId: id, tool: 'openai-computer', input: request.body },
        async () => {
          const body = objectOf(request.body, 'body');
          onlyFields(body, 'body', [], ['action', 'actions', 'call_id', 'type', 'id', 'status', 'pending_safety_checks']);
          const callId = optionalId(body.call_id, 'call_id');
          if (body.type !== undefined && body.type !== 'computer_call') throw new InvalidRequestError('type must be "computer_call" when given');
          ignoredText(body.pending_safety_checks, 'pending_safety_checks');
          const list = openaiActionList(body);
          const outcome = await manager.perform(id, (scaler) => translateOpenAI(list, scaler), { screenshotAfter: true, format: { format: 'png' } });
          return { outcome, callId };
        },
        (done) => outcomeStep(done.outcome),
      );
      return {
        type: 'computer_call_output',
        ...(callId ? { call_id: callId } : {}),
        output: { type: 'computer_screenshot', image_url: dataUrl(required(outcome.image)) },
      };
    },
  );

  app.post<{ Params: { id: string }; Body: unknown }>(
    '/v1/sessions/:id/tools/gemini-computer',
    {
      bodyLimit: VENDOR_BODY_LIMIT_BYTES,
      schema: {
        summary: "Gemini's computer-use FunctionCall in, its FunctionResponse out",
        description:
          "x, y are on Gemini's 0-999 grid, mapped onto the real screen. A mistake the model can correct is a FunctionResponse with response.error " +
          "(HTTP 200, nothing done); a body that is no function call is a 400. Browser-only calls need a browser in the sandbox (the desktop template's Firefox).",
        tags: ['tools'],
        params: sessionIdParams,
        response: { 200: { type: 'object', additionalProperties: true }, ...errors },
      },
    },
    async (request) => {
      const sessionId = request.params.id;
      const answer = await recordedCall(
        trajectory,
        { sessionId, tool: 'gemini-computer', input: request.body },
        () => geminiCall(manager, sessionId, request.body),
        (done, durationMs): StepOutcome =>
          done.error !== undefined ? { durationMs, error: { code: 'tool_error', message: done.error } } : outcomeStep(done.outcome, durationMs),
      );
      return answer.body;
    },
  );
}

/** A Gemini call run: its FunctionResponse, the outcome of its actions, or the error the model is shown. */
async function geminiCall(
  manager: VendorSessions,
  sessionId: string,
  input: unknown,
): Promise<{ body: Record<string, unknown>; outcome?: ActionOutcome; error?: string }> {
  const call = objectOf(input, 'body');
  onlyFields(call, 'body', ['name'], ['args', 'id']);
  if (typeof call.name !== 'string') throw new InvalidRequestError('name must be a string');
  const id = optionalId(call.id, 'id');
  const head = { name: call.name.slice(0, 64), ...(id ? { id } : {}) };
  try {
    const view = manager.get(sessionId);
    const scaler = new Scaler(view.display, { width: view.computerTool.display_width_px, height: view.computerTool.display_height_px });
    const plan = translateGemini(call, scaler);
    const first = plan.browser ? await browserStep(manager, sessionId, plan.browser, plan.name) : [];
    const outcome = await manager.perform(sessionId, () => [...first, ...plan.actions], { screenshotAfter: true, format: { format: 'png' } });
    const image = required(outcome.image);
    const body = {
      ...head,
      response: plan.url ? { url: plan.url } : {},
      parts: [{ inlineData: { mimeType: image.mediaType, data: image.data.toString('base64') } }],
    };
    return { body, outcome };
  } catch (err) {
    if (!(err instanceof InvalidRequestError || err instanceof DesktopError || err instanceof DesktopActionFailedError || err instanceof AppNotFoundError))
      throw err;
    return { body: { ...head, response: { error: err.message } }, error: err.message };
  }
}

/** A vendor call's actions as a trajectory step: timings, cursor, and the settled screen. */
function outcomeStep(outcome: ActionOutcome | undefined, durationMs?: number): StepOutcome {
  return { durationMs: outcome?.durationMs ?? durationMs ?? 0, settleMs: outcome?.settleMs, cursor: outcome?.cursor, image: outcome?.image };
}

/**
 * What a browser-only call needs done (or there) before its input; answers the input that
 * goes first (for a navigation in an open browser window, its address bar).
 */
async function browserStep(manager: VendorSessions, id: string, step: BrowserStep, name: string): Promise<ComputerAction[]> {
  // A person holding the desktop (takeover) refuses the browser step too, before it runs.
  manager.checkAgentControl(id);
  const actions = await manager.attachment(id, 'desktop-actions', (ctx) =>
    DesktopActions.attach(ctx, manager.displayOf(id), manager.displayStartedBySession(id)),
  );
  const noBrowser = `${name} needs a web browser, and this sandbox has none (the desktop template has Firefox)`;
  try {
    if (step.kind === 'launch') {
      await actions.launch(BROWSER_APP);
      return [];
    }
    const browsers = (await actions.windows()).filter((w) => BROWSER_CLASS.test(w.app) || BROWSER_CLASS.test(w.instance));
    const target = browsers.find((w) => w.focused) ?? browsers[0];
    if (!target) {
      if (step.kind === 'window') throw new InvalidRequestError(`${name} needs an open web browser window, and none is open (call open_web_browser first)`);
      // No browser window: the desktop's default application for the URL starts on it.
      await actions.open(step.target);
      return [];
    }
    // Keys go to the focused window: the browser's, not whatever was in front of it.
    if (!target.focused) await actions.focus(String(target.id));
    return step.kind === 'open' ? addressBarActions(step.target) : [];
  } catch (err) {
    if (err instanceof AppNotFoundError || err instanceof DesktopActionFailedError) throw new InvalidRequestError(`${noBrowser}: ${err.message}`);
    throw err;
  }
}

function optionalId(value: unknown, field: string): string | undefined {
  if (value === undefined) return undefined;
  if (typeof value !== 'string' || !CALL_ID.test(value)) throw new InvalidRequestError(`${field} must be an id of letters, digits, _ and - (at most 200)`);
  return value;
}

function required(image: EncodedImage | undefined): EncodedImage {
  if (!image) throw new Error('the last action returned no screenshot');
  return image;
}

function dataUrl(image: EncodedImage): string {
  return `data:${image.mediaType};base64,${image.data.toString('base64')}`;
}
