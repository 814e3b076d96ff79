/**
 * The viewer's code (viewer-page.ts), plain browser JavaScript. It reads the embedded JSON,
 * puts every piece of text in with textContent, and draws the click point or drag path of a
 * step over its screenshot in an SVG whose viewBox is the image's own pixel size, so the
 * marker lands on the pixel the model named whatever size the image is shown at.
 */
export const VIEWER_SCRIPT = String.raw`
(function () {
  'use strict';
  var data = JSON.parse(document.getElementById('data').textContent);
  var token = new URLSearchParams(location.search).get('token');
  var steps = data.steps;
  var current = 0;
  var showing = 'auto';
  var $ = function (id) { return document.getElementById(id); };
  var SVG = 'http://www.w3.org/2000/svg';

  function withToken(url) { return token ? url + (url.indexOf('?') < 0 ? '?' : '&') + 'token=' + encodeURIComponent(token) : url; }
  function seconds(ms) { return ms >= 60000 ? Math.floor(ms / 60000) + ' min ' + ((ms % 60000) / 1000).toFixed(1) + ' s' : (ms / 1000).toFixed(ms < 10000 ? 2 : 1) + ' s'; }
  function millis(ms) { return ms < 1 ? '< 1 ms' : ms < 1000 ? Math.round(ms) + ' ms' : seconds(ms); }
  function el(tag, cls, text) { var e = document.createElement(tag); if (cls) e.className = cls; if (text !== undefined) e.textContent = text; return e; }
  function point(v) { return Array.isArray(v) && v.length === 2 && typeof v[0] === 'number' && typeof v[1] === 'number' ? v : null; }
  function plural(n, word) { return n + ' ' + word + (n === 1 ? '' : 's'); }

  /** One line saying what a step did, for people. */
  function describe(s) {
    var i = s.input || {};
    var a = s.action || '?';
    if (s.tool === 'bash') return i.restart === true ? 'bash: restart the shell' : 'bash: ' + String(i.command || '').split('\n')[0];
    if (s.tool === 'str_replace_based_edit_tool') return 'editor: ' + a + ' ' + (i.path || '');
    if (s.tool === 'desktop') return 'desktop: ' + a.replace(/_/g, ' ') + (i.target ? ' ' + i.target : i.app ? ' ' + i.app : i.windowId ? ' window ' + i.windowId : '');
    if (s.tool === 'openai-computer') return 'OpenAI: ' + a.replace(/_/g, ' ');
    if (s.tool === 'gemini-computer') return 'Gemini: ' + a.replace(/_/g, ' ');
    var c = point(i.coordinate);
    var at = c ? ' at (' + c[0] + ', ' + c[1] + ')' : '';
    if (a === 'type') return typeof i.text === 'string' ? 'type "' + i.text + '"' : 'type ' + plural(i.textLength || 0, 'character');
    if (a === 'key' || a === 'hold_key') return typeof i.text === 'string' ? a.replace('_', ' ') + ' ' + i.text : a.replace('_', ' ') + ' (' + plural(i.textLength || 0, 'character') + ')';
    if (a === 'left_click_drag') { var from = point(i.start_coordinate); return 'drag' + (from ? ' from (' + from[0] + ', ' + from[1] + ')' : '') + (c ? ' to (' + c[0] + ', ' + c[1] + ')' : ''); }
    if (a === 'scroll') return 'scroll ' + (i.scroll_direction || '') + ' ' + (i.scroll_amount || '') + at;
    if (a === 'wait') return 'wait ' + (i.duration || '') + ' s';
    return a.replace(/_/g, ' ') + at;
  }

  function header() {
    $('session').textContent = data.sessionId;
    var state = $('state');
    state.textContent = data.state + (data.endReason ? ' · ' + data.endReason.replace('_', ' ') : '');
    if (data.state !== 'ready' && data.state !== 'creating') state.classList.add(data.state === 'failed' ? 'failed' : 'ended');
    var t = data.totals;
    var items = [
      ['Started', new Date(data.startedAt).toLocaleString()],
      ['Steps', String(t.steps) + (t.droppedSteps ? ' (+' + t.droppedSteps + ' not stored)' : '')],
      ['Errors', String(t.errors)],
      ['Time in calls', seconds(t.busyMs)],
      ['Span', seconds(t.lastEndMs)],
    ];
    items.forEach(function (kv) { var d = el('div'); d.appendChild(el('dt', '', kv[0])); d.appendChild(el('dd', '', kv[1])); $('totals').appendChild(d); });
  }

  function list() {
    var ol = $('step-list');
    if (steps.length === 0) { ol.appendChild(el('li', 'empty-list', 'No steps yet.')); return; }
    steps.forEach(function (s, k) {
      var li = el('li', s.error ? 'failed' : '');
      li.appendChild(el('span', 'n', '#' + s.n));
      li.appendChild(el('span', 'what', describe(s)));
      li.appendChild(el('span', 't', '+' + seconds(s.startedMs)));
      li.addEventListener('click', function () { go(k); });
      ol.appendChild(li);
    });
  }

  function video(s) {
    var v = $('video');
    v.textContent = '';
    if (data.videoUrl && s) {
      var at = Math.max(0, s.startedMs - (data.videoStartMs || 0));
      var a = el('a', '', 'Open in video at t=' + seconds(at));
      a.href = withToken(data.videoUrl) + '#t=' + (at / 1000).toFixed(2);
      v.appendChild(a);
    } else {
      v.textContent = 'No recording of this session';
    }
  }

  /** The click point, or the drag path, of a step in the image's own pixels. */
  function marks(s) {
    var i = s.input || {};
    var c = point(i.coordinate);
    var from = point(i.start_coordinate);
    var svg = $('overlay');
    while (svg.firstChild) svg.removeChild(svg.firstChild);
    if (from && c) {
      var line = document.createElementNS(SVG, 'line');
      line.setAttribute('x1', from[0]); line.setAttribute('y1', from[1]); line.setAttribute('x2', c[0]); line.setAttribute('y2', c[1]);
      line.setAttribute('stroke', '#ff00ff'); line.setAttribute('stroke-width', '3'); line.setAttribute('stroke-dasharray', '8 5');
      svg.appendChild(line);
      ring(svg, from, 7);
    }
    if (c) ring(svg, c, 12);
  }
  function ring(svg, p, r) {
    var circle = document.createElementNS(SVG, 'circle');
    circle.setAttribute('cx', p[0]); circle.setAttribute('cy', p[1]); circle.setAttribute('r', r);
    circle.setAttribute('fill', 'none'); circle.setAttribute('stroke', '#ff00ff'); circle.setAttribute('stroke-width', '3');
    svg.appendChild(circle);
    var dot = document.createElementNS(SVG, 'circle');
    dot.setAttribute('cx', p[0]); dot.setAttribute('cy', p[1]); dot.setAttribute('r', 2.5); dot.setAttribute('fill', '#ff00ff');
    svg.appendChild(dot);
  }

  /** The screen after a step: the screenshot it returned, else the recording's frame at its end. */
  function afterOf(s) { return s.screenshots.after || s.screenshots.frame || null; }

  function which(s) {
    var pointer = point((s.input || {}).coordinate) !== null;
    if (showing === 'before' && s.screenshots.before) return 'before';
    if (showing === 'after' && afterOf(s)) return 'after';
    if (pointer && s.screenshots.before) return 'before';
    return afterOf(s) ? 'after' : s.screenshots.before ? 'before' : null;
  }

  function show(s) {
    var when = which(s);
    var img = $('screenshot');
    var frame = $('frame');
    $('show-before').disabled = !s.screenshots.before;
    $('show-after').disabled = !afterOf(s);
    $('show-before').classList.toggle('on', when === 'before');
    $('show-after').classList.toggle('on', when === 'after');
    if (!when) {
      frame.classList.add('empty'); img.hidden = true; $('overlay').style.display = 'none';
      $('shot-caption').textContent = 'No screenshot was taken around this step.';
      return;
    }
    // The recording's frame is the real screen's pixels, not the model's: no marker on it.
    var recorded = when === 'after' && !s.screenshots.after;
    frame.classList.remove('empty'); img.hidden = false; $('overlay').style.display = recorded ? 'none' : '';
    img.onload = function () {
      if (!recorded) { $('overlay').setAttribute('viewBox', '0 0 ' + img.naturalWidth + ' ' + img.naturalHeight); marks(s); }
      img.dataset.loaded = String(s.n) + (recorded ? 'frame' : when);
    };
    img.dataset.loaded = '';
    img.src = withToken(recorded ? s.screenshots.frame : s.screenshots[when]);
    img.alt = (recorded ? 'Recording after' : 'Screen ' + when) + ' step ' + s.n;
    $('shot-caption').textContent = recorded
      ? 'The recording at the end of this step (it returned no screenshot of its own)'
      : when === 'before' ? 'The screen before this step (as the model saw it)' : 'The screen after this step (the settled screenshot it returned)';
  }

  function chip(label, value) { var c = el('span', 'chip'); c.appendChild(document.createTextNode(label + ' ')); c.appendChild(el('b', '', value)); return c; }

  function details(s) {
    var timing = $('timing');
    timing.textContent = '';
    timing.appendChild(chip('at', '+' + seconds(s.startedMs)));
    timing.appendChild(chip('took', millis(s.durationMs)));
    if (s.settleMs !== null && s.settleMs !== undefined) timing.appendChild(chip('settled in', millis(s.settleMs)));
    timing.appendChild(chip('via', s.tool === 'actions' ? 'actions API' : s.tool === 'desktop' ? 'desktop API' : s.tool + ' tool'));
    if (s.cursor) timing.appendChild(chip('cursor', '(' + s.cursor.x + ', ' + s.cursor.y + ')'));
    var err = $('error');
    err.hidden = !s.error;
    err.textContent = s.error ? s.error.code + ': ' + s.error.message : '';
    $('output-wrap').hidden = s.output === null || s.output === undefined || s.output === '';
    $('output').textContent = s.output || '';
    var table = $('input');
    table.textContent = '';
    Object.keys(s.input || {}).forEach(function (key) {
      var v = s.input[key];
      var tr = el('tr');
      var masked = key === 'textLength' || key === 'keysLength';
      tr.appendChild(el('td', '', masked ? key.slice(0, -6) : key));
      tr.appendChild(el('td', '', masked ? '(' + plural(v || 0, 'character') + ', not stored)' : typeof v === 'string' ? v : JSON.stringify(v)));
      table.appendChild(tr);
    });
  }

  function go(k) {
    if (steps.length === 0) { $('step-title').textContent = 'No steps yet'; $('prev').disabled = true; $('next').disabled = true; video(null); return; }
    current = Math.max(0, Math.min(steps.length - 1, k));
    var s = steps[current];
    $('step-title').textContent = '#' + s.n + ' · ' + describe(s);
    $('position').textContent = (current + 1) + ' / ' + steps.length;
    $('prev').disabled = current === 0;
    $('next').disabled = current === steps.length - 1;
    var items = $('step-list').children;
    for (var j = 0; j < items.length; j++) items[j].classList.toggle('current', j === current);
    if (items[current] && items[current].scrollIntoView) items[current].scrollIntoView({ block: 'nearest' });
    history.replaceState(null, '', location.pathname + location.search + '#step-' + s.n);
    show(s);
    details(s);
    video(s);
  }

  $('prev').addEventListener('click', function () { go(current - 1); });
  $('next').addEventListener('click', function () { go(current + 1); });
  $('show-before').addEventListener('click', function () { showing = 'before'; show(steps[current]); });
  $('show-after').addEventListener('click', function () { showing = 'after'; show(steps[current]); });
  document.addEventListener('keydown', function (e) {
    if (e.key === 'ArrowLeft') { go(current - 1); e.preventDefault(); }
    else if (e.key === 'ArrowRight') { go(current + 1); e.preventDefault(); }
    else if (e.key === 'Home') go(0);
    else if (e.key === 'End') go(steps.length - 1);
  });
  /** #step-<n> in the URL opens that step: a link to one moment of the trajectory. */
  function fromHash() {
    var match = /^#step-(\d+)$/.exec(location.hash);
    var k = match ? steps.findIndex(function (s) { return s.n === Number(match[1]); }) : 0;
    go(k < 0 ? 0 : k);
  }
  window.addEventListener('hashchange', fromHash);
  header();
  list();
  fromHash();
})();
`;
