import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';
import type { Asset } from './novnc-assets.js';

const JS = 'text/javascript; charset=utf-8';

/**
 * The terminal page's script. xterm.js draws; its attach addon sends what is typed as text
 * frames and writes the binary frames it gets (the process socket's protocol:
 * api/routes/process-socket.ts); the fit addon sizes the terminal to the window, and each
 * new size goes to the shell as a resize message. The socket's close says how the shell ended.
 */
const TERMINAL_SCRIPT = `
import { Terminal } from './xterm.mjs';
import { AttachAddon } from './addon-attach.mjs';
import { FitAddon } from './addon-fit.mjs';

const session = document.body.dataset.session;
const token = new URLSearchParams(location.search).get('token') || '';
const state = document.getElementById('state');
const show = (text, kind) => { state.textContent = text; state.className = 'state ' + (kind || ''); };

const term = new Terminal({ cursorBlink: true, fontSize: 14, scrollback: 5000,
  fontFamily: 'ui-monospace, SFMono-Regular, Menlo, "DejaVu Sans Mono", monospace', theme: { background: '#0b0d10' } });
const fit = new FitAddon();
term.loadAddon(fit);
term.open(document.getElementById('terminal'));
fit.fit();
window.sbxTerminal = term;

const scheme = location.protocol === 'https:' ? 'wss:' : 'ws:';
const query = new URLSearchParams({ token, cols: String(term.cols), rows: String(term.rows) });
const socket = new WebSocket(scheme + '//' + location.host + '/v1/sessions/' + encodeURIComponent(session) + '/terminal/ws?' + query);
socket.binaryType = 'arraybuffer';
socket.addEventListener('open', () => {
  show('connected', 'connected');
  term.loadAddon(new AttachAddon(socket));
  term.focus();
});
socket.addEventListener('close', (event) => {
  let ended = 'disconnected';
  try {
    const exit = JSON.parse(event.reason || '{}');
    if (exit.exitCode !== undefined || exit.signal) ended = 'the shell ended (' + (exit.signal ? 'signal ' + exit.signal : 'exit code ' + exit.exitCode) + ')';
  } catch { if (event.reason) ended = event.reason; }
  show(ended + ': reload the page for a new shell', event.code === 1000 ? 'ended' : 'failed');
});
term.onResize(({ cols, rows }) => {
  if (socket.readyState === WebSocket.OPEN) socket.send(JSON.stringify({ type: 'resize', cols, rows }));
});
window.addEventListener('resize', () => fit.fit());
`;

/**
 * The terminal page's files by their path under TERMINAL_ASSETS_PREFIX: its script and
 * xterm.js's ES modules and stylesheet from the @xterm packages (no CDN). An allow-list built
 * once: a request names a key of this map or gets a 404.
 */
export function loadTerminalAssets(): Map<string, Asset> {
  const require = createRequire(import.meta.url);
  const lib = (pkg: string) => path.dirname(require.resolve(pkg)); // each package's main is lib/<name>.js
  const xterm = lib('@xterm/xterm');
  return new Map<string, Asset>([
    ['xterm.mjs', { body: readFileSync(path.join(xterm, 'xterm.mjs')), contentType: JS }],
    ['xterm.css', { body: readFileSync(path.join(xterm, '..', 'css', 'xterm.css')), contentType: 'text/css; charset=utf-8' }],
    ['addon-attach.mjs', { body: readFileSync(path.join(lib('@xterm/addon-attach'), 'addon-attach.mjs')), contentType: JS }],
    ['addon-fit.mjs', { body: readFileSync(path.join(lib('@xterm/addon-fit'), 'addon-fit.mjs')), contentType: JS }],
    ['terminal.js', { body: Buffer.from(TERMINAL_SCRIPT, 'utf8'), contentType: JS }],
  ]);
}
