/** The viewer's CSS (viewer-page.ts): a header of totals, the step list on the left, the screenshot and the step's details. */
export const VIEWER_STYLE = `
:root { --bg:#f6f7f9; --panel:#fff; --ink:#1d2330; --muted:#6b7385; --line:#e3e6ec; --accent:#2f6fed; --bad:#d92d3a; --ok:#1f9d55; --marker:#ff00ff; }
* { box-sizing: border-box; }
body { margin:0; font:14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color:var(--ink); background:var(--bg); }
.top { display:flex; flex-wrap:wrap; align-items:center; gap:12px 28px; padding:12px 20px; background:var(--panel); border-bottom:1px solid var(--line); }
.title { display:flex; align-items:baseline; gap:10px; }
h1 { font-size:18px; margin:0; }
.session { font-family:ui-monospace, Menlo, monospace; color:var(--muted); }
.badge { font-size:12px; padding:2px 8px; border-radius:10px; background:#e8eefc; color:var(--accent); text-transform:uppercase; letter-spacing:.03em; }
.badge.ended { background:#eceef2; color:var(--muted); }
.badge.failed { background:#fde8ea; color:var(--bad); }
.totals { display:flex; gap:22px; margin:0; }
.totals div { display:flex; flex-direction:column; }
.totals dt { font-size:11px; color:var(--muted); text-transform:uppercase; letter-spacing:.04em; }
.totals dd { margin:0; font-weight:600; font-variant-numeric:tabular-nums; }
.video { margin-left:auto; color:var(--muted); font-size:13px; }
.video a { color:var(--accent); }
.layout { display:grid; grid-template-columns:280px 1fr; height:calc(100vh - 62px); }
.steps { overflow:auto; border-right:1px solid var(--line); background:var(--panel); }
.steps ol { list-style:none; margin:0; padding:6px; }
.steps li { display:grid; grid-template-columns:34px 1fr auto; gap:6px; align-items:center; padding:7px 8px; border-radius:6px; cursor:pointer; }
.steps li:hover { background:#f0f3f8; }
.steps li.current { background:#e8eefc; }
.steps .n { color:var(--muted); font-variant-numeric:tabular-nums; }
.steps .what { white-space:nowrap; overflow:hidden; text-overflow:ellipsis; }
.steps .t { color:var(--muted); font-size:12px; font-variant-numeric:tabular-nums; }
.steps li.failed .what::before { content:"●"; color:var(--bad); margin-right:5px; }
.stage { overflow:auto; padding:16px 22px 40px; }
.stage-head { display:flex; align-items:center; gap:16px; justify-content:space-between; }
h2 { font-size:17px; margin:0; }
h3 { font-size:12px; color:var(--muted); text-transform:uppercase; letter-spacing:.04em; margin:16px 0 6px; }
.nav { display:flex; align-items:center; gap:8px; }
button { font:inherit; padding:4px 10px; border:1px solid var(--line); border-radius:6px; background:var(--panel); cursor:pointer; }
button:disabled { opacity:.4; cursor:default; }
.toggle button.on { background:var(--accent); border-color:var(--accent); color:#fff; }
#position { color:var(--muted); font-variant-numeric:tabular-nums; min-width:70px; text-align:center; }
.shot { margin:14px 0 0; }
.frame { position:relative; display:inline-block; max-width:100%; border:1px solid var(--line); background:#000; line-height:0; }
.frame img { display:block; max-width:100%; max-height:calc(100vh - 320px); width:auto; height:auto; }
.frame svg { position:absolute; left:0; top:0; width:100%; height:100%; pointer-events:none; }
.frame.empty { display:flex; align-items:center; justify-content:center; width:480px; height:120px; background:#eceef2; color:var(--muted); line-height:1.4; }
figcaption { color:var(--muted); font-size:12px; margin-top:4px; }
.timing { display:flex; gap:10px; flex-wrap:wrap; margin-top:12px; }
.chip { background:var(--panel); border:1px solid var(--line); border-radius:14px; padding:2px 10px; font-size:13px; font-variant-numeric:tabular-nums; }
.chip b { font-weight:600; }
.error { margin-top:12px; padding:10px 12px; border-left:4px solid var(--bad); background:#fdf0f1; border-radius:4px; white-space:pre-wrap; }
pre { margin:0; padding:10px 12px; background:#141821; color:#e6e9ef; border-radius:6px; max-height:260px; overflow:auto; white-space:pre-wrap; word-break:break-word; font:12.5px/1.45 ui-monospace, Menlo, monospace; }
table { border-collapse:collapse; background:var(--panel); border:1px solid var(--line); border-radius:6px; }
td { padding:5px 12px; border-top:1px solid var(--line); vertical-align:top; }
tr:first-child td { border-top:0; }
td:first-child { color:var(--muted); font-family:ui-monospace, Menlo, monospace; white-space:nowrap; }
td:last-child { font-family:ui-monospace, Menlo, monospace; white-space:pre-wrap; word-break:break-word; max-width:70ch; }
.empty-list { padding:20px; color:var(--muted); }
`;
