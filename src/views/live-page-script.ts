import { ASSETS_PREFIX } from './live-page.js';

/**
 * The live page's script (served as a file: the page's CSP allows no inline script). It
 * reads its token from its own path, opens noVNC on the token's WebSocket, and polls the
 * token's state for takeovers. View-only is enforced by the server's proxy; `viewOnly`
 * here only spares the browser from sending what would be dropped.
 */
export const LIVE_VIEW_SCRIPT = `
import RFB from '${ASSETS_PREFIX}/novnc/core/rfb.js';

const body = document.body;
const base = location.pathname.replace(/\\/+$/, '');
const mode = body.dataset.mode;
const stateEl = document.getElementById('state');
const controlEl = document.getElementById('control');
const expiryEl = document.getElementById('expiry');
const button = document.getElementById('takeover');
const screen = document.getElementById('screen');
let holding = false;
let ended = false;

function setState(text, cls) {
  stateEl.textContent = text;
  stateEl.className = 'state ' + (cls || '');
}

function notice(title, text) {
  const box = document.createElement('div');
  box.className = 'notice';
  const inner = document.createElement('div');
  const h = document.createElement('h1');
  h.textContent = title;
  const p = document.createElement('p');
  p.textContent = text;
  inner.append(h, p);
  box.append(inner);
  screen.replaceChildren(box);
}

const wsUrl = (location.protocol === 'https:' ? 'wss://' : 'ws://') + location.host + base + '/rfb';
const rfb = new RFB(screen, wsUrl, { shared: true });
rfb.scaleViewport = true;
rfb.resizeSession = false;
rfb.viewOnly = mode !== 'control';
rfb.background = '#0b0d10';
window.liveView = { rfb };
rfb.addEventListener('connect', () => { setState('live', 'connected'); if (button) button.disabled = false; });
rfb.addEventListener('disconnect', (e) => {
  ended = true;
  setState('disconnected', 'failed');
  if (button) button.disabled = true;
  refresh().finally(() => {
    if (screen.querySelector('.notice')) return;
    if (!e.detail.clean) notice('Disconnected', 'The desktop could not be reached, or the link is no longer valid. Reload the page to try again.');
    else notice('Disconnected', 'The live view ended. Reload the page to reconnect.');
  });
});
async function post(what) {
  const res = await fetch(base + '/' + what, { method: 'POST' });
  if (!res.ok) {
    const body = await res.json().catch(() => ({}));
    alert((body.error && body.error.message) || ('failed: ' + res.status));
  }
  await refresh();
}

if (button) button.addEventListener('click', () => post(holding ? 'handback' : 'takeover'));

async function refresh() {
  let res;
  try { res = await fetch(base + '/state', { cache: 'no-store' }); } catch { return; }
  if (!res.ok) {
    const body = await res.json().catch(() => ({}));
    ended = true;
    if (button) button.disabled = true;
    setState('ended', 'failed');
    notice('This live view is closed', (body.error && body.error.message) || 'Ask for a new link.');
    return;
  }
  const state = await res.json();
  holding = !!state.control && state.control.heldBy === state.viewId;
  if (state.control) {
    controlEl.className = 'held';
    controlEl.textContent = holding ? 'You have control: the agent is paused' : 'Another viewer has control';
  } else {
    controlEl.className = 'muted';
    controlEl.textContent = 'Agent in control';
  }
  if (button) {
    button.textContent = holding ? 'Hand back' : 'Take over';
    button.className = holding ? 'handback' : '';
  }
  const left = Math.max(0, Date.parse(state.expiresAt) - Date.now());
  expiryEl.textContent = 'link expires in ' + (left > 3600000 ? Math.round(left / 3600000) + ' h' : Math.max(1, Math.round(left / 60000)) + ' min');
}

refresh();
setInterval(() => { if (!ended) refresh(); }, 2000);
`;
