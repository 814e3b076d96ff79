/**
 * JSON schemas of the HTTP API. Fastify validates requests with them and @fastify/swagger
 * publishes them as the OpenAPI document at /openapi.json, so the docs cannot drift.
 */
import { RUNTIMES } from '../runtimes/registered.js';
import { recordingStatusSchema } from './recording-schemas.js';
export { MIN_SCREEN_SIDE as MIN_SIDE, MAX_SCREEN_SIDE as MAX_SIDE } from '../computer/display-size.js';
import { MIN_SCREEN_SIDE as MIN_SIDE, MAX_SCREEN_SIDE as MAX_SIDE } from '../computer/display-size.js';

export const errorSchema = {
  $id: 'Error',
  type: 'object',
  required: ['error'],
  properties: {
    error: {
      type: 'object',
      required: ['code', 'message'],
      properties: {
        code: { type: 'string', description: 'Stable machine-readable code, e.g. invalid_request, not_found' },
        message: { type: 'string', description: 'What went wrong and, where it helps, what to do' },
        requestId: { type: 'string', description: "On server errors (5xx): the request's id in the orchestrator's log, which has the details" },
      },
    },
  },
} as const;

const TOOL_VERSIONS = ['computer_20241022', 'computer_20250124', 'computer_20251124'] as const;

/** The Anthropic computer tool definition of a session, in its model space. */
const computerToolSchema = {
  type: 'object',
  required: ['type', 'name', 'display_width_px', 'display_height_px'],
  properties: {
    type: { type: 'string', enum: TOOL_VERSIONS },
    name: { type: 'string', enum: ['computer'] },
    display_width_px: { type: 'integer' },
    display_height_px: { type: 'integer' },
    enable_zoom: { type: 'boolean' },
  },
} as const;

/**
 * A session as every route answers it (sessions/session-view.ts builds it). The client SDK's
 * SessionInfo is generated from it (scripts/generate-client-types.ts), so what is required
 * here is what every answer has.
 */
/** A volume in a session: which, where the guest sees it, and whether it may write it. */
const volumeMountSchema = {
  type: 'object',
  required: ['name', 'path', 'readOnly'],
  properties: {
    name: { type: 'string', minLength: 1, maxLength: 63 },
    path: { type: 'string', minLength: 2, maxLength: 256, description: 'Absolute path in the guest, e.g. /home/user/data' },
    readOnly: { type: 'boolean', default: false },
  },
} as const;

export const sessionSchema = {
  $id: 'Session',
  type: 'object',
  required: [
    'id',
    'tenant',
    'state',
    'runtime',
    'template',
    'display',
    'computerTool',
    'tools',
    'screenshot',
    'timeoutSeconds',
    'maxLifetimeSeconds',
    'metadata',
    'network',
    'createdAt',
    'expiresAt',
    'lifetimeEndsAt',
  ],
  properties: {
    id: { type: 'string' },
    tenant: { type: 'string', description: "The tenant that owns the session (the API key's; `local` without keys)" },
    state: { type: 'string', enum: ['creating', 'ready', 'paused', 'destroying', 'destroyed', 'failed'] },
    runtime: { type: 'string', enum: RUNTIMES.names },
    template: { type: 'string', description: 'The template its sandbox booted (GET /v1/templates)' },
    display: {
      type: 'object',
      required: ['width', 'height'],
      properties: { width: { type: 'integer' }, height: { type: 'integer' } },
    },
    computerTool: { ...computerToolSchema, description: 'The tool definition to pass to the Messages API as is (in the model space)' },
    tools: {
      type: 'object',
      required: ['anthropic', 'openai', 'gemini'],
      description: "Each vendor's tool definition for this session, to pass as is (docs/api.md, Other vendors)",
      properties: {
        anthropic: { ...computerToolSchema, description: 'The same as computerTool' },
        openai: {
          type: 'object',
          description: "OpenAI's computer tool, sized to the model space: x, y of /tools/openai-computer are read in it",
          required: ['type', 'display_width', 'display_height', 'environment'],
          properties: {
            type: { type: 'string', enum: ['computer_use_preview'] },
            display_width: { type: 'integer' },
            display_height: { type: 'integer' },
            environment: { type: 'string', enum: ['linux'] },
          },
        },
        gemini: {
          type: 'object',
          description: "Gemini's computer_use tool (no size: Gemini points on a 0-999 grid)",
          required: ['computerUse'],
          properties: {
            computerUse: { type: 'object', required: ['environment'], properties: { environment: { type: 'string', enum: ['ENVIRONMENT_BROWSER'] } } },
          },
        },
      },
    },
    screenshot: {
      type: 'object',
      description: 'The default screenshot format chosen at create: format, and quality for jpeg and webp',
      required: ['format'],
      properties: { format: { type: 'string', enum: ['png', 'jpeg', 'webp'] }, quality: { type: 'integer' } },
    },
    timeoutSeconds: { type: 'integer', description: 'Idle timeout: the session ends this long after its last activity' },
    maxLifetimeSeconds: { type: 'integer', description: 'Maximum lifetime in running time, counted from createdAt (a pause does not count)' },
    pausedRetentionSeconds: {
      type: 'integer',
      description: 'How long it may stay paused: past it, a paused session is destroyed (endReason paused_retention)',
    },
    pausedUntil: {
      type: 'string',
      format: 'date-time',
      description: 'While paused: when it is destroyed unless resumed (paused.since + pausedRetentionSeconds)',
    },
    metadata: { type: 'object', additionalProperties: true },
    network: {
      type: 'object',
      description: 'The guest network policy chosen at create time, and how the sandbox is reached',
      required: ['egress', 'transport', 'interfaces'],
      properties: {
        egress: { type: 'boolean' },
        transport: {
          type: 'string',
          enum: ['tcp', 'unix', 'vsock'],
          description: "What carries the orchestrator's SSH channel: tcp over the sandbox's NIC, a Unix socket (containers), or Firecracker's hybrid vsock",
        },
        interfaces: {
          type: 'array',
          items: { type: 'string' },
          description: "The sandbox's network interfaces: ['lo'] alone when it is reached over a Unix socket or vsock without egress (no NIC, no address)",
        },
      },
    },
    createdAt: { type: 'string', format: 'date-time' },
    expiresAt: {
      type: 'string',
      format: 'date-time',
      description: 'When the session is destroyed unless it is used again (activity, keepalive); never after lifetimeEndsAt',
    },
    lifetimeEndsAt: { type: 'string', format: 'date-time', description: 'When the session is destroyed whatever happens: createdAt + maxLifetimeSeconds' },
    error: { type: 'string', description: 'Why the session failed' },
    endReason: {
      type: 'string',
      enum: ['deleted', 'idle_timeout', 'max_lifetime', 'failed', 'shutdown', 'node_lost', 'paused_retention'],
      description:
        'Why the session ended (or is ending): a DELETE, its idle timeout, its maximum lifetime, a failure (see error), the orchestrator stopping, ' +
        'its node lost, or a pause kept longer than pausedRetentionSeconds',
    },
    paused: {
      type: ['object', 'null'],
      description:
        "While the session is paused (state paused): how (memory or disk), since when, and the bytes of its state on the host's disk; null while it runs",
      properties: { mode: { type: 'string', enum: ['memory', 'disk'] }, since: { type: 'string', format: 'date-time' }, bytes: { type: 'integer' } },
    },
    onIdle: { type: 'string', enum: ['destroy', 'pause'], description: 'What its idle timeout does: destroy the session, or pause it' },
    autoResume: { type: 'boolean', description: 'A request to it while paused resumes it first (true) or answers 409 session_paused' },
    volumes: {
      type: 'array',
      description: 'The volumes mounted in it (absent: none)',
      items: volumeMountSchema,
    },
    hostKeyFingerprint: {
      type: 'string',
      description: "The SHA-256 fingerprint of the host key pinned for its guest (as `ssh-keygen -lf` prints it): each session's own, a fork's too",
    },
    snapshot: { type: 'string', description: 'A fork: the snapshot it was started from (absent: booted)' },
    recording: recordingStatusSchema,
    control: {
      type: 'object',
      description: 'Present while a person holds the desktop through a live view (takeover): agent actions answer 409 human_in_control',
      required: ['heldBy', 'since'],
      properties: { heldBy: { type: 'string', description: 'the viewId holding it' }, since: { type: 'string', format: 'date-time' } },
    },
  },
} as const;

const FORMAT = { type: 'string', enum: ['png', 'jpeg', 'webp'], description: "The image format (default: the session's, png unless set at create)" } as const;
const QUALITY_RULE = 'jpeg and webp only: 1-100 (default: jpeg 80, webp 100); webp at 100 is lossless (exact pixels). A quality for png is a 400';

/**
 * The format of a screenshot as query parameters, next to ?scaled and ?screenshot. Query
 * strings are not coerced here: quality is digits, its range checked with the rest
 * (computer/screenshot-format.ts), so every refusal names the field.
 */
export const screenshotFormatQuery = {
  format: FORMAT,
  quality: { type: 'string', pattern: '^[0-9]{1,3}$', description: `An integer: ${QUALITY_RULE}` },
} as const;

export const createSessionBody = {
  type: 'object',
  additionalProperties: false,
  properties: {
    template: {
      type: 'string',
      minLength: 1,
      maxLength: 64,
      description: "The template to boot (GET /v1/templates lists them; default: the orchestrator's). An unknown name is a 400 listing the names there are",
    },
    // No schema default for the size: a template's own default screen applies when neither is given.
    width: { type: 'integer', minimum: MIN_SIDE, maximum: MAX_SIDE, description: "Screen width (default: the template's screen, else 1024)" },
    height: { type: 'integer', minimum: MIN_SIDE, maximum: MAX_SIDE, description: "Screen height (default: the template's screen, else 768)" },
    timeoutSeconds: {
      type: 'integer',
      minimum: 10,
      maximum: 86_400,
      description:
        "Idle timeout: the session is destroyed after this long without a request (default: the tenant's, SBX_TENANT_SESSION_LIMITS, else SBX_TIMEOUT_SECONDS, 300)",
    },
    maxLifetimeSeconds: {
      type: 'integer',
      minimum: 10,
      description:
        'Maximum lifetime: the session is destroyed this long after its creation (in running time: a pause does not count), whatever happens. ' +
        "At most the tenant's maximum (SBX_TENANT_SESSION_LIMITS, else SBX_MAX_LIFETIME_SECONDS, default 3600), which is also the default; more is a 400",
    },
    pausedRetentionSeconds: {
      type: 'integer',
      minimum: 1,
      description:
        "How long the session may stay paused before it is destroyed. At most the tenant's retention (SBX_TENANT_SESSION_LIMITS, " +
        'else SBX_PAUSED_RETENTION_SECONDS, default 7 days), which is also the default; more is a 400',
    },
    metadata: { type: 'object', additionalProperties: true, maxProperties: 64 },
    record: { type: 'boolean', default: false, description: 'Record the screen to a video (GET /v1/sessions/{id}/recording) from the start' },
    network: {
      type: 'object',
      additionalProperties: false,
      description:
        'The guest network policy. A sandbox never reaches the host, the orchestrator, other sandboxes or private ranges; ' +
        'with egress true it may reach the internet through NAT (default false: no network beyond its SSH link)',
      properties: { egress: { type: 'boolean', default: false } },
    },
    trajectory: {
      type: 'object',
      additionalProperties: false,
      description:
        "Every action and tool call is stored as the session's trajectory (GET /v1/sessions/:id/trajectory). Text typed into the desktop " +
        '(type, key) is stored as its length unless keepTypedText is true',
      properties: { keepTypedText: { type: 'boolean', default: false } },
    },
    scaling: {
      description: 'The screen size the model sees: "auto" (default: XGA/WXGA/FWXGA as the computer-use reference chooses), "none", or {width, height}',
      oneOf: [
        { type: 'string', enum: ['auto', 'none'] },
        {
          type: 'object',
          additionalProperties: false,
          required: ['width', 'height'],
          properties: { width: { type: 'integer', minimum: 64, maximum: MAX_SIDE }, height: { type: 'integer', minimum: 64, maximum: MAX_SIDE } },
        },
      ],
    },
    onIdle: {
      type: 'string',
      enum: ['destroy', 'pause'],
      description: "What the idle timeout does: destroy the session or pause it (docs/pause.md; default: the tenant's, else SBX_ON_IDLE, destroy)",
    },
    autoResume: {
      type: 'boolean',
      description: 'A request to the session while it is paused resumes it first (default true, SBX_AUTO_RESUME); false: it answers 409 session_paused',
    },
    toolVersion: {
      type: 'string',
      enum: TOOL_VERSIONS,
      description: 'The computer tool version of the tool definition in computerTool (default computer_20250124)',
    },
    volumes: {
      type: 'array',
      maxItems: 8,
      description:
        "The tenant's volumes to mount (POST /v1/volumes), each at an absolute guest path outside the system's directories; one writer per volume " +
        '(409 volume_in_use), readers share when all are read-only; an unknown volume is a 404 volume_not_found',
      items: { ...volumeMountSchema, required: ['name', 'path'], additionalProperties: false },
    },
    snapshot: {
      type: 'string',
      maxLength: 200,
      description:
        "Start from this snapshot of the tenant's (POST /v1/sessions/:id/snapshots) instead of booting: a fork, with its own keys, host key and address; " +
        "its template and screen are the snapshot's (404 snapshot_not_found for an unknown one, or another tenant's)",
    },
    screenshot: {
      type: 'object',
      additionalProperties: false,
      description: "The session's default screenshot format (screenshot route, actions, the computer tool); png unless set",
      properties: { format: FORMAT, quality: { type: 'integer', minimum: 1, maximum: 100, description: QUALITY_RULE } },
    },
  },
} as const;

export const sessionIdParams = {
  type: 'object',
  required: ['id'],
  properties: { id: { type: 'string', minLength: 1, maxLength: 64 } },
} as const;

/** The computer-use tool input; each action's own field rules are checked by the server. */
export const actionBody = {
  type: 'object',
  required: ['action'],
  description: 'A computer-use tool input exactly as the model sent it (see the computer-use tool contract)',
  properties: {
    action: { type: 'string' },
    coordinate: { type: 'array', items: {}, description: '[x, y]' },
    start_coordinate: { type: 'array', items: {}, description: '[x, y]' },
    text: {},
    key: {},
    scroll_direction: {},
    scroll_amount: {},
    duration: {},
    region: { type: 'array', items: {}, description: '[x0, y0, x1, y1]' },
  },
  additionalProperties: true,
} as const;

export const actionResultSchema = {
  $id: 'ActionResult',
  type: 'object',
  required: ['action', 'durationMs'],
  properties: {
    action: { type: 'string' },
    output: { type: 'string', description: 'Text result, e.g. X=10,Y=20 for cursor_position' },
    cursor: { type: 'object', required: ['x', 'y'], properties: { x: { type: 'integer' }, y: { type: 'integer' } } },
    image: {
      type: 'object',
      required: ['mediaType', 'data'],
      description: 'A screenshot: of the screenshot and zoom actions, or the settled screen with ?screenshot=true',
      properties: { mediaType: { type: 'string', enum: ['image/png', 'image/jpeg', 'image/webp'] }, data: { type: 'string', description: 'base64' } },
    },
    settleMs: { type: 'number', description: 'How long the screen took to settle before the screenshot' },
    durationMs: { type: 'number' },
  },
} as const;

export const TIMEOUT_SECONDS = {
  type: 'integer',
  minimum: 10,
  maximum: 86_400,
  description: 'The new idle timeout: the session ends this long after its last activity',
} as const;

/** PATCH /v1/sessions/:id: the one way to change a live session's timeouts. */
export const updateSessionBody = {
  type: 'object',
  additionalProperties: false,
  minProperties: 1,
  description: 'The fields to change; at least one. The request counts as activity: the idle deadline moves to now + timeoutSeconds.',
  properties: {
    timeoutSeconds: TIMEOUT_SECONDS,
    maxLifetimeSeconds: {
      type: 'integer',
      minimum: 10,
      description:
        "The new maximum lifetime, counted from createdAt: more than the session's age, at most the tenant's maximum " +
        '(SBX_TENANT_SESSION_LIMITS, else SBX_MAX_LIFETIME_SECONDS); a lifetime can be extended up to that maximum, never past it',
    },
  },
} as const;

/** POST /v1/sessions/:id/keepalive: optional; without a body the idle timeout stays. */
export const keepaliveBody = {
  type: 'object',
  additionalProperties: false,
  properties: { timeoutSeconds: TIMEOUT_SECONDS },
} as const;

/** POST /v1/sessions/:id/pause: how deep (the body is optional: auto). */
export const pauseBody = {
  type: 'object',
  additionalProperties: false,
  properties: {
    mode: {
      type: 'string',
      enum: ['memory', 'disk', 'auto'],
      description:
        'memory: frozen in place (no CPU, RAM kept); disk: state written to disk (no RAM); auto (default): disk where the runtime does it, else memory',
    },
  },
} as const;
