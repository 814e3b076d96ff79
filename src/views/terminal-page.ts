import { PAGE_HEADERS } from './live-page.js';

/** Where the terminal page's script, xterm.js and its addons are served (terminal-assets.ts). */
export const TERMINAL_ASSETS_PREFIX = '/v1/terminal-assets';

/** The live view's headers, but the page also loads xterm.js's stylesheet from this server. */
export const TERMINAL_PAGE_HEADERS: Readonly<Record<string, string>> = {
  ...PAGE_HEADERS,
  'content-security-policy':
    "default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
};

function escapeHtml(text: string): string {
  return text.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
}

const STYLE = `
  :root { color-scheme: dark; --bar: #15181d; --line: #2a2f37; --text: #e6e9ee; --dim: #9aa3ae; --ok: #3fb950; --warn: #d29922; --bad: #f85149; }
  * { box-sizing: border-box; }
  html, body { margin: 0; height: 100%; background: #0b0d10; color: var(--text); font: 13px/1.4 system-ui, -apple-system, "Segoe UI", sans-serif; }
  body { display: flex; flex-direction: column; }
  header { display: flex; align-items: center; gap: 14px; height: 40px; padding: 0 14px; background: var(--bar); border-bottom: 1px solid var(--line); flex: none; }
  .brand { font-weight: 600; letter-spacing: .02em; }
  .sid code { font: 12px ui-monospace, SFMono-Regular, Menlo, monospace; background: #0b0d10; padding: 2px 6px; border-radius: 4px; border: 1px solid var(--line); }
  .muted { color: var(--dim); }
  .state::before { content: ""; display: inline-block; width: 8px; height: 8px; border-radius: 50%; margin-right: 6px; background: var(--warn); }
  .state.connected::before { background: var(--ok); }
  .state.ended::before, .state.failed::before { background: var(--bad); }
  main { position: relative; flex: 1; min-height: 0; padding: 8px 10px; }
  #terminal { position: absolute; inset: 8px 10px; }
`;

/**
 * A terminal on the session, opened with a link token of purpose `terminal`: a login shell
 * in a pseudo-terminal, through the session's SSH connection, drawn by xterm.js. The
 * script (terminal-assets.ts) reads the token from this page's URL and opens the socket.
 */
export function terminalPage(sessionId: string): string {
  return `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="referrer" content="no-referrer"><link rel="icon" href="data:,">
<title>Terminal · ${escapeHtml(sessionId)}</title>
<link rel="stylesheet" href="${TERMINAL_ASSETS_PREFIX}/xterm.css"><style>${STYLE}</style></head>
<body data-session="${escapeHtml(sessionId)}">
<header>
  <span class="brand">Sandbox terminal</span>
  <span class="sid muted">session <code>${escapeHtml(sessionId)}</code></span>
  <span class="state" id="state">connecting…</span>
</header>
<main><div id="terminal"></div></main>
<script type="module" src="${TERMINAL_ASSETS_PREFIX}/terminal.js"></script>
</body></html>`;
}
