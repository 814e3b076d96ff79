import type { IncomingHttpHeaders } from 'node:http';
import { OrchestratorError } from '../../errors.js';
import { isLoopbackAddress } from './auth-mode.js';

/**
 * What keeps web pages out of a keyless server (and out of /metrics, which local clients
 * read without a key). Without keys, anything that can send a request to 127.0.0.1 is
 * trusted, and a browser on this machine will send one for any page it shows:
 * - DNS rebinding: a page on evil.example re-resolves its own name to 127.0.0.1 and then
 *   talks to us as "same origin". Its requests still say `Host: evil.example`, so only
 *   loopback names are accepted in Host.
 * - Cross-site requests (CSRF): a page elsewhere posts to http://127.0.0.1:8080/... with a
 *   "simple" request that needs no CORS preflight. Browsers mark those with `Origin` and
 *   `Sec-Fetch-Site` (headers a page cannot set), so a request that carries an Origin other
 *   than our own, or says it is cross-site or same-site, is refused.
 * curl, SDKs and agents send no Origin and no Sec-Fetch-Site, and a page served by this
 * server itself is same-origin: all are unaffected. With an API key none of this applies: a
 * page cannot know the key.
 */
export class BrowserRequestError extends OrchestratorError {
  constructor(message: string, code: 'invalid_host' | 'cross_origin_request') {
    super(code, message);
  }
}

/**
 * A Host header naming this machine: localhost or a name under .localhost (RFC 6761: never
 * resolved through DNS), 127.0.0.0/8 or [::1], with any port or none. A request without
 * Host (HTTP/1.0) passes: browsers always send it.
 */
export function isLoopbackHostHeader(host: string | undefined): boolean {
  if (host === undefined) return true;
  const match = /^(\[[0-9a-fA-F:.]+\]|[^:[\]]+)(?::\d{1,5})?$/.exec(host);
  if (!match) return false;
  const name = (match[1] as string).toLowerCase();
  return name === 'localhost' || name.endsWith('.localhost') || isLoopbackAddress(name);
}

/** Throws unless the request could only have come from a local program or our own pages. */
export function assertNotFromAWebPage(headers: IncomingHttpHeaders, port: number | undefined): void {
  const host = headers.host;
  if (!isLoopbackHostHeader(host)) {
    const example = `http://127.0.0.1${port ? `:${port}` : ''}`;
    throw new BrowserRequestError(
      `the Host header "${String(host).slice(0, 100)}" is not a loopback name: requests without an API key are only answered ` +
        `when addressed to localhost, 127.0.0.1 or [::1] (a web page on another domain must not be able to drive this server by ` +
        `DNS rebinding). Use ${example}, or create an API key (\`sbx keys create --tenant <name>\`) and send it`,
      'invalid_host',
    );
  }
  const site = headers['sec-fetch-site'];
  if (site !== undefined && site !== 'same-origin' && site !== 'none') {
    throw new BrowserRequestError(
      `refused a ${String(site).slice(0, 20)} request from a web browser: without an API key, only programs on this machine ` +
        'and pages of this server itself may use it. Send the request from curl or an SDK, or create an API key and send it',
      'cross_origin_request',
    );
  }
  const origin = headers.origin;
  if (origin !== undefined && !sameOrigin(origin, host)) {
    throw new BrowserRequestError(
      `refused a request from the web page origin "${origin.slice(0, 100)}": without an API key, only programs on this machine ` +
        'and pages of this server itself may use it. Send the request from curl or an SDK, or create an API key and send it',
      'cross_origin_request',
    );
  }
}

function sameOrigin(origin: string, host: string | undefined): boolean {
  if (host === undefined) return false;
  try {
    const url = new URL(origin);
    return (url.protocol === 'http:' || url.protocol === 'https:') && url.host === host.toLowerCase();
  } catch {
    return false; // "null" (a sandboxed frame, a file:// page) or garbage
  }
}
