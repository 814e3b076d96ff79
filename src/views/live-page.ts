import type { ViewGrant } from './view-tokens.js';

/** Where the page's own script and noVNC's modules are served (novnc-assets.ts). */
export const ASSETS_PREFIX = '/v1/view-assets';

/**
 * Headers of every live-view page: nothing cached (the URL carries a credential), no
 * referrer sent anywhere, no framing by another site, and scripts only from this server.
 */
export const PAGE_HEADERS: Readonly<Record<string, string>> = {
  'cache-control': 'no-store',
  'referrer-policy': 'no-referrer',
  'x-frame-options': 'DENY',
  'x-content-type-options': 'nosniff',
  'content-security-policy':
    "default-src 'none'; script-src 'self'; style-src 'unsafe-inline'; img-src 'self' data: blob:; connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
};

function escapeHtml(text: string): string {
  return text.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
}

const STYLE = `
  :root { color-scheme: dark; --bar: #15181d; --line: #2a2f37; --text: #e6e9ee; --dim: #9aa3ae; --ok: #3fb950; --warn: #d29922; --bad: #f85149; --accent: #388bfd; }
  * { box-sizing: border-box; }
  html, body { margin: 0; height: 100%; background: #0b0d10; color: var(--text); font: 13px/1.4 system-ui, -apple-system, "Segoe UI", sans-serif; }
  body { display: flex; flex-direction: column; }
  header { display: flex; align-items: center; gap: 14px; height: 40px; padding: 0 14px; background: var(--bar); border-bottom: 1px solid var(--line); flex: none; }
  .brand { font-weight: 600; letter-spacing: .02em; }
  .sid code { font: 12px ui-monospace, SFMono-Regular, Menlo, monospace; color: var(--text); background: #0b0d10; padding: 2px 6px; border-radius: 4px; border: 1px solid var(--line); }
  .muted { color: var(--dim); }
  .pill { padding: 2px 8px; border-radius: 999px; font-size: 12px; border: 1px solid var(--line); }
  .mode-view { color: #a5d6ff; }
  .mode-control { color: #ffa657; }
  .state::before { content: ""; display: inline-block; width: 8px; height: 8px; border-radius: 50%; margin-right: 6px; background: var(--warn); vertical-align: 0; }
  .state.connected::before { background: var(--ok); }
  .state.failed::before { background: var(--bad); }
  .spacer { flex: 1; }
  .held { color: #ffa657; font-weight: 600; }
  button { font: inherit; color: #fff; background: var(--accent); border: 0; border-radius: 6px; padding: 5px 12px; cursor: pointer; }
  button.handback { background: #6e7681; }
  button:disabled { opacity: .5; cursor: default; }
  main { position: relative; flex: 1; min-height: 0; }
  #screen { position: absolute; inset: 0; }
  .notice { position: absolute; inset: 0; display: flex; align-items: center; justify-content: center; padding: 24px; }
  .notice div { max-width: 560px; padding: 20px 24px; background: var(--bar); border: 1px solid var(--line); border-radius: 10px; }
  .notice h1 { font-size: 16px; margin: 0 0 8px; }
  .notice p { margin: 0; color: var(--dim); }
`;

/** The live view of one grant: a slim bar over a full-window noVNC canvas. */
export function livePage(grant: ViewGrant): string {
  const mode = grant.mode === 'control' ? 'control' : 'view only';
  return `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="referrer" content="no-referrer"><link rel="icon" href="data:,">
<title>Live view · ${escapeHtml(grant.sessionId)}</title><style>${STYLE}</style></head>
<body data-session="${escapeHtml(grant.sessionId)}" data-mode="${escapeHtml(grant.mode)}" data-expires="${escapeHtml(grant.expiresAt)}">
<header>
  <span class="brand">Sandbox live view</span>
  <span class="sid muted">session <code>${escapeHtml(grant.sessionId)}</code></span>
  <span class="pill mode-${escapeHtml(grant.mode)}" id="mode">${mode}</span>
  <span class="state" id="state">connecting…</span>
  <span class="spacer"></span>
  <span id="control" class="muted"></span>
  ${grant.mode === 'control' ? '<button id="takeover" type="button" disabled>Take over</button>' : ''}
  <span class="muted" id="expiry"></span>
</header>
<main><div id="screen"></div></main>
<script type="module" src="${ASSETS_PREFIX}/live-view.js"></script>
</body></html>`;
}

/** What a browser sees for a link that opens nothing: what happened and what to do next. */
export function refusedPage(title: string, message: string): string {
  return `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="referrer" content="no-referrer"><title>${escapeHtml(title)}</title><style>${STYLE}</style></head>
<body><header><span class="brand">Sandbox live view</span></header>
<main><div class="notice"><div><h1>${escapeHtml(title)}</h1><p>${escapeHtml(message)}</p></div></div></main></body></html>`;
}
