/** The guest ports a URL may name: TCP's, without 0. */
export const MIN_GUEST_PORT = 1;
export const MAX_GUEST_PORT = 65_535;

/** The query parameter and cookie that carry a port token (names no guest app is likely to use). */
export const PORT_TOKEN_QUERY = 'sbx_token';
export const PORT_TOKEN_COOKIE = 'sbx_port_token';

/** The path prefix of a session's port in the path-based form. */
export function portPathPrefix(sessionId: string, port: number): string {
  return `/v1/sessions/${sessionId}/ports/${port}`;
}

/**
 * The session and port a Host header names in the host-based form, `<port>-<session id>.<domain>`
 * (any port of the orchestrator after it), or undefined when it names something else.
 */
export function parsePortHost(host: string | undefined, domain: string | undefined): { sessionId: string; port: number } | undefined {
  if (host === undefined || domain === undefined) return undefined;
  const name = host.toLowerCase().replace(/:\d{1,5}$/, '');
  if (!name.endsWith(`.${domain}`)) return undefined;
  const label = name.slice(0, -(domain.length + 1));
  const match = /^([0-9]{1,5})-([a-z0-9]{1,63})$/.exec(label);
  if (!match) return undefined;
  const port = Number(match[1]);
  if (port < MIN_GUEST_PORT || port > MAX_GUEST_PORT) return undefined;
  return { sessionId: match[2] as string, port };
}

/** The host-based origin of a session's port, on the scheme and port the request came in by. */
export function portHostOrigin(protocol: string, requestHost: string, domain: string, sessionId: string, port: number): string {
  const listenPort = /:(\d{1,5})$/.exec(requestHost)?.[1];
  return `${protocol}://${port}-${sessionId}.${domain}${listenPort ? `:${listenPort}` : ''}`;
}

/**
 * `url`'s path and query without the port token parameter (which the guest never sees); the
 * other parameters are kept byte for byte (not re-encoded).
 */
export function withoutTokenParam(url: string): { path: string; token: string | undefined } {
  const q = url.indexOf('?');
  if (q < 0) return { path: url, token: undefined };
  let token: string | undefined;
  const kept = url
    .slice(q + 1)
    .split('&')
    .filter((pair) => {
      const eq = pair.indexOf('=');
      if ((eq < 0 ? pair : pair.slice(0, eq)) !== PORT_TOKEN_QUERY) return true;
      token = eq < 0 ? '' : decodeURIComponentSafe(pair.slice(eq + 1));
      return false;
    });
  return { path: url.slice(0, q) + (kept.length > 0 ? `?${kept.join('&')}` : ''), token };
}

function decodeURIComponentSafe(text: string): string {
  try {
    return decodeURIComponent(text);
  } catch {
    return text;
  }
}

/** The port token cookie's value in a Cookie header, and the header without it (for the guest). */
export function splitTokenCookie(cookie: string | undefined): { token: string | undefined; rest: string | undefined } {
  if (cookie === undefined) return { token: undefined, rest: undefined };
  let token: string | undefined;
  const kept = cookie.split(';').filter((part) => {
    const [name, ...value] = part.trim().split('=');
    if (name !== PORT_TOKEN_COOKIE) return true;
    token = value.join('=');
    return false;
  });
  const rest = kept
    .map((p) => p.trim())
    .filter((p) => p !== '')
    .join('; ');
  return { token, rest: rest === '' ? undefined : rest };
}
