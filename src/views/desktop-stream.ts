import { OrchestratorError } from '../errors.js';
import { commandLine } from '../transport/quote.js';
import type { GuestTransport } from '../transport/index.js';
import type { LiveViews } from './live-views.js';
import type { ViewMode } from './view-tokens.js';

/**
 * E2B Desktop's stream (`stream.start()`, `stream.getUrl()`) answered by our live view.
 *
 * The SDK starts x11vnc and noVNC's novnc_proxy in the guest, waits for port 6080, and builds
 * `https://<getHost(6080)>/vnc.html?autoconnect=true&resize=scale[&view_only=true][&password=..]`
 * itself (the password only when the caller passes `authKey`, i.e. with `requireAuth`). That
 * request reaches the orchestrator (the E2B surface routes the `6080-<id>.<domain>` name), which
 * answers it here with a 303 to the session's live view: a fresh view token in the path, never a
 * password. The stream's own rule is kept: with requireAuth (the SDK's x11vnc runs with
 * `-usepw`), the URL's password must be the one the SDK stored in the guest (~/.vnc/passwd,
 * compared in the guest by x11vnc itself: DES, which Node's OpenSSL 3 no longer offers); a
 * stream that is not started opens nothing. One screen: the live view shows the display the
 * SDK drives (:0 in the xfce template), through our own x11vnc, not the SDK's.
 */

/** The port E2B Desktop's stream listens on and getUrl() names (VNCServer.port). */
export const E2B_STREAM_PORT = 6080;
/** The page getUrl() names. */
export const E2B_STREAM_PATH = '/vnc.html';

/** Passwords the SDK makes are 16 of [A-Za-z0-9] (generateRandomString); anything else is refused before the guest sees it. */
const PASSWORD = /^[A-Za-z0-9]{1,64}$/;

/**
 * Run in the guest as the desktop user, the URL's password as $1 (an argument, never text of
 * the script). Prints `none` (no x11vnc of the SDK's: the stream is not started), `open` (started
 * without requireAuth), `match` or `mismatch`. Our own live view's x11vnc runs as `sbx-vnc`,
 * so `pgrep -x x11vnc` finds only the SDK's.
 */
const STREAM_CHECK = `auth=none
for p in $(pgrep -x x11vnc); do
  args=$(tr '\\0' ' ' <"/proc/$p/cmdline" 2>/dev/null) || continue
  case " $args " in
  *" -usepw "* | *" -rfbauth "* | *" -passwd "* | *" -passwdfile "*) auth=password ;;
  *) [ "$auth" = none ] && auth=open ;;
  esac
done
if [ "$auth" != password ]; then echo "$auth"; exit 0; fi
if [ -z "\${1-}" ] || [ ! -r "$HOME/.vnc/passwd" ]; then echo mismatch; exit 0; fi
dir=$(mktemp -d) || exit 1
if x11vnc -storepasswd "$1" "$dir/passwd" >/dev/null 2>&1 </dev/null && cmp -s "$dir/passwd" "$HOME/.vnc/passwd"; then echo match; else echo mismatch; fi
rm -rf "$dir"`;

export class StreamNotStartedError extends OrchestratorError {
  constructor(sessionId: string) {
    super('stream_not_started', `session ${sessionId} has no E2B Desktop stream running: call stream.start() first`);
  }
}

export class StreamPasswordError extends OrchestratorError {
  constructor() {
    super('stream_password_invalid', 'this stream was started with requireAuth: open the URL stream.getUrl({ authKey: stream.getAuthKey() }) gives');
  }
}

/** What the stream check needs of the sessions (the manager has both). */
export interface DesktopStreamSessions {
  connection(id: string): GuestTransport;
}

export interface DesktopStreamRequest {
  sessionId: string;
  /** The tenant the request was authenticated as (the session's owner: checked by the caller's routing). */
  tenant: string;
  /** The query of the getUrl() URL: password, view_only (autoconnect and resize need nothing: the live page scales). */
  query: URLSearchParams;
  /** Where the API is reached, e.g. `https://sandboxes.example.com`: the live view's URL is made on it. */
  apiOrigin: string;
}

/**
 * The live view URL a request for E2B Desktop's stream page is redirected to (answer it with a
 * 303 and `Cache-Control: no-store`). Throws 409 stream_not_started, 401 stream_password_invalid,
 * or what LiveViews.create throws (the session is not ready, ...).
 */
export async function desktopStreamLocation(views: LiveViews, sessions: DesktopStreamSessions, request: DesktopStreamRequest): Promise<string> {
  const password = request.query.get('password') ?? '';
  if (password !== '' && !PASSWORD.test(password)) throw new StreamPasswordError();
  const result = await sessions
    .connection(request.sessionId)
    .exec(commandLine(['sh', '-c', STREAM_CHECK, 'sh', password]), { timeoutMs: 10_000, maxOutputBytes: 1024 });
  const answer = result.stdout.toString('utf8').trim();
  if (result.exitCode !== 0 || !['none', 'open', 'match', 'mismatch'].includes(answer)) {
    throw new Error(`the guest's stream check failed (exit ${result.exitCode ?? result.signal}): ${result.stderr.toString('utf8').slice(0, 200)}`);
  }
  if (answer === 'none') throw new StreamNotStartedError(request.sessionId);
  if (answer === 'mismatch') throw new StreamPasswordError();
  const mode: ViewMode = request.query.get('view_only') === 'true' ? 'view' : 'control';
  const { token } = await views.create(request.sessionId, request.tenant, mode, undefined);
  return `${request.apiOrigin.replace(/\/+$/, '')}/v1/views/${token}`;
}

/** Whether a request to a session's guest port is E2B Desktop's stream page (the caller answers it with desktopStreamLocation). */
export function isDesktopStreamRequest(port: number, path: string): boolean {
  return port === E2B_STREAM_PORT && (path === E2B_STREAM_PATH || path.startsWith(`${E2B_STREAM_PATH}?`));
}
