import { randomBytes } from 'node:crypto';
import type { StepJson, TrajectorySummary } from './trajectory-json.js';
import { VIEWER_SCRIPT } from './viewer-script.js';
import { VIEWER_STYLE } from './viewer-style.js';

export interface ViewerData extends TrajectorySummary {
  steps: StepJson[];
}

/**
 * The trajectory viewer: one self-contained page (no CDN, no other request but the
 * screenshots), its data embedded as JSON in a non-executable script element. Everything the
 * model or the guest wrote (inputs, outputs, error messages) reaches the page only through
 * that JSON and is put in with textContent, never as HTML; `<` is escaped so nothing can end
 * the element early. Inline code runs by a per-response nonce (the CSP allows nothing else).
 */
export function viewerPage(data: ViewerData): { html: string; nonce: string } {
  const nonce = randomBytes(16).toString('base64');
  const json = JSON.stringify(data)
    .replace(/</g, '\\u003c')
    .replace(/\u2028/g, '\\u2028')
    .replace(/\u2029/g, '\\u2029');
  const html = `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="referrer" content="no-referrer">
<title>Trajectory · session ${data.sessionId}</title>
<style nonce="${nonce}">${VIEWER_STYLE}</style>
</head>
<body>
<header class="top">
  <div class="title">
    <h1>Trajectory</h1>
    <span class="session" id="session"></span>
    <span class="badge" id="state"></span>
  </div>
  <dl class="totals" id="totals"></dl>
  <div class="video" id="video"></div>
</header>
<main class="layout">
  <nav class="steps" aria-label="Steps"><ol id="step-list"></ol></nav>
  <section class="stage" id="stage">
    <div class="stage-head">
      <h2 id="step-title"></h2>
      <div class="nav">
        <div class="toggle" role="group" aria-label="Screenshot">
          <button type="button" id="show-before">Before</button>
          <button type="button" id="show-after">After</button>
        </div>
        <button type="button" id="prev" title="Previous step (←)">←</button>
        <span id="position"></span>
        <button type="button" id="next" title="Next step (→)">→</button>
      </div>
    </div>
    <figure class="shot" id="shot">
      <div class="frame" id="frame">
        <img id="screenshot" alt="">
        <svg id="overlay" xmlns="http://www.w3.org/2000/svg" preserveAspectRatio="none" aria-hidden="true"></svg>
      </div>
      <figcaption id="shot-caption"></figcaption>
    </figure>
    <div class="details">
      <div class="timing" id="timing"></div>
      <div class="error" id="error" hidden></div>
      <div class="output-wrap" id="output-wrap" hidden><h3>Result</h3><pre id="output"></pre></div>
      <div class="input-wrap"><h3>Input</h3><table id="input"></table></div>
    </div>
  </section>
</main>
<script type="application/json" id="data">${json}</script>
<script nonce="${nonce}">${VIEWER_SCRIPT}</script>
</body>
</html>
`;
  return { html, nonce };
}
