/**
 * Issue 22's gateway figures, side by side in one run on real parts: a node (`sbx node`, real
 * container sandboxes), a gateway (`sbx gateway`) and PostgreSQL, each its own process
 * (gateway-cluster.ts). One session, created through the gateway, is asked the same thing
 * through the gateway and straight from the node (the gateway protocol's headers,
 * x-sbx-cluster-secret and x-sbx-tenant, sent by the same client code over the same fetch),
 * A and B alternating in the same seconds so that the machine's load falls on both alike:
 *
 * - screenshots (PNG, 1024x768, the idle screen): p50 through the gateway / p50 straight;
 * - an action (mouse_move to alternating points): p50 through the gateway - p50 straight;
 * - the live view: one view token's RFB WebSocket opened straight and through the gateway at
 *   once, a raw viewer on each asking for frames as fast as they come (rfb-counter.ts), while
 *   the bash tool paints the guest's root window a new colour in a loop: FramebufferUpdates
 *   through the gateway / straight, over the same seconds.
 */
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { readFile } from 'node:fs/promises';
import os from 'node:os';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import WebSocket from 'ws';
import { Sandbox, SandboxClient } from '../client/index.js';
import { processCpuSeconds } from './cpu.js';
import { BENCH_TENANT, freePort, startBenchCluster, type BenchCluster } from './gateway-cluster.js';
import { RfbFrameCounter } from './rfb-counter.js';
import { summarize, type Summary } from './stats.js';

export interface GatewayBenchSettings {
  /** Screenshots timed each way. */
  readonly n: number;
  /** Actions timed each way (more: the figure is a difference of two p50s of ~2 ms). */
  readonly actionN: number;
  readonly liveViewSeconds: number;
  /** The guest's X display (SBX_DISPLAY). */
  readonly display: number;
  readonly resourcePrefix: string;
  readonly subnet: string;
  readonly imagesDir: string;
  /** What the node and gateway processes inherit (the bench's environment, from its entry point). */
  readonly env: NodeJS.ProcessEnv;
  /** Node options of the gateway process alone (e.g. --cpu-prof). */
  readonly gatewayNodeOptions?: string[];
}

export interface Pair {
  readonly gateway: Summary;
  readonly straight: Summary;
  /** CPU of the gateway process per request it forwarded, ms (/proc, 10 ms ticks over the whole phase): its cost on an idle host. */
  readonly gatewayCpuMsPerRequest: number;
  /** The same of the node process per request it answered (both sides': twice as many), for comparison. */
  readonly nodeCpuMsPerRequest: number;
  /**
   * The gateway's CPU per request it forwarded as the gateway itself counts it (process.cpuUsage(), in microseconds,
   * read from its /metrics before and after the timed requests: the two scrapes' own cost is in it).
   */
  readonly gatewayOwnCpuMsPerRequest: number;
}

export interface ViewerCount {
  readonly updates: number;
  readonly bytes: number;
}

export interface LiveViewCount {
  readonly seconds: number;
  readonly gateway: ViewerCount;
  readonly straight: ViewerCount;
  /** The gateway process's CPU over the counted seconds (/proc, 10 ms ticks) per frame it relayed, ms. */
  readonly gatewayCpuMsPerFrame: number;
}

/** A bare proxy process (bare-proxy.ts) against straight, in the same seconds: the floor of one hop on this host. */
export interface HopFloor {
  readonly screenshotRatio: number;
  readonly actionAddedMs: number;
}

export interface GatewayFigures {
  /** How the parts ran: each its own process. */
  readonly parts: 'processes';
  readonly screenshot: Pair & { readonly ratio: number; readonly pngBytes: number };
  readonly action: Pair & { readonly addedMs: number };
  readonly floor: HopFloor;
  readonly liveView: LiveViewCount & { readonly ratio: number };
  /** os.loadavg()[0] before and after the part (the machine is shared). */
  readonly loadAverage: readonly [number, number];
}

/** The floor's proxy, built next to this file (the bench runs from dist/). */
const BARE_PROXY = fileURLToPath(new URL('./bare-proxy.js', import.meta.url));

/** Untimed rounds before each phase's timed ones. */
const WARMUP = 3;
/** Untimed requests of each kind each way before the first phase. */
const JIT_WARMUP = 30;

/**
 * Times `a` and `b` `n` times each, alternating which goes first, after `warmup` untimed
 * rounds: both sides see the same moments of the machine's load.
 */
export async function timeInterleaved(
  n: number,
  a: (i: number) => Promise<unknown>,
  b: (i: number) => Promise<unknown>,
  warmup = WARMUP,
): Promise<{ a: number[]; b: number[] }> {
  const samples = { a: [] as number[], b: [] as number[] };
  for (let i = 0; i < warmup + n; i++) {
    const order: Array<['a' | 'b', (i: number) => Promise<unknown>]> =
      i % 2 === 0
        ? [
            ['a', a],
            ['b', b],
          ]
        : [
            ['b', b],
            ['a', a],
          ];
    for (const [side, op] of order) {
      const started = performance.now();
      await op(i);
      if (i >= warmup) samples[side].push(performance.now() - started);
    }
  }
  return samples;
}

/** One phase's samples (a: through the gateway, b: straight) and the gateway's and node's CPU over them. */
export interface Timed {
  a: number[];
  b: number[];
  gatewayCpuSeconds: number;
  nodeCpuSeconds: number;
  /** The gateway's own count (process.cpuUsage()) over the timed requests alone. */
  gatewayOwnCpuSeconds: number;
}

/** The figures of the goal table from the samples: p50 ratio, p50 difference, frame ratio. */
export function gatewayFigures(
  shots: Timed,
  actions: Timed,
  view: LiveViewCount,
  pngBytes: number,
): Pick<GatewayFigures, 'screenshot' | 'action' | 'liveView'> {
  const pair = (t: Timed): Pair => ({
    gateway: summarize(t.a),
    straight: summarize(t.b),
    gatewayCpuMsPerRequest: (t.gatewayCpuSeconds * 1000) / t.a.length,
    nodeCpuMsPerRequest: (t.nodeCpuSeconds * 1000) / (t.a.length + t.b.length),
    gatewayOwnCpuMsPerRequest: (t.gatewayOwnCpuSeconds * 1000) / t.a.length,
  });
  const screenshot = pair(shots);
  const action = pair(actions);
  return {
    screenshot: { ...screenshot, ratio: screenshot.gateway.p50 / screenshot.straight.p50, pngBytes },
    action: { ...action, addedMs: action.gateway.p50 - action.straight.p50 },
    liveView: { ...view, ratio: view.straight.updates > 0 ? view.gateway.updates / view.straight.updates : Number.NaN },
  };
}

interface Viewer {
  counter: RfbFrameCounter;
  /** What broke the viewer (a protocol error, the socket), if anything did. */
  failure(): Error | undefined;
  close(): void;
}

/** A raw viewer on a view's RFB WebSocket: resolves once the first frame came. */
async function openViewer(url: string, headers: Record<string, string>): Promise<Viewer> {
  const ws = new WebSocket(url, { headers, perMessageDeflate: false });
  const counter = new RfbFrameCounter((message) => ws.send(message));
  let failure: Error | undefined;
  ws.on('message', (data: Buffer) => {
    try {
      counter.feed(data);
    } catch (err) {
      failure = err as Error;
      ws.terminate();
    }
  });
  ws.on('error', (err) => (failure ??= err));
  ws.on('unexpected-response', (_req, res) => (failure ??= new Error(`${url}: the upgrade was refused (HTTP ${res.statusCode})`)));
  ws.on('close', () => (failure ??= new Error(`${url}: closed`)));
  const deadline = Date.now() + 20_000;
  while (counter.updates === 0) {
    const error = failure ?? (Date.now() > deadline ? new Error(`${url}: no frame in 20 s`) : undefined);
    if (error) {
      ws.terminate();
      throw error;
    }
    await sleep(20);
  }
  return { counter, failure: () => failure, close: () => ws.terminate() };
}

async function measureLiveView(
  cluster: BenchCluster,
  sandbox: Sandbox,
  seconds: number,
  display: number,
  gatewayCpuSeconds: () => Promise<number>,
): Promise<LiveViewCount> {
  const view = await sandbox.liveView({ mode: 'view' });
  const viewPath = new URL(view.url).pathname; // /v1/views/<token>, on the gateway's host
  // The guest's root window a new colour every ~10 ms for the whole measurement (and a margin).
  const loop =
    `(end=$((SECONDS+${Math.ceil(seconds) + 8})); i=0; while [ $SECONDS -lt $end ]; do i=$((i+1)); ` +
    `DISPLAY=:${display} xsetroot -solid "#$(printf '%06x' $(( (i * 2654435) % 16777216 )))"; sleep 0.01; done) >/dev/null 2>&1 &`;
  await sandbox.bash(loop);
  const straight = await openViewer(`${cluster.nodeUrl.replace(/^http/, 'ws')}${viewPath}/rfb`, { 'x-sbx-cluster-secret': cluster.secret });
  let gateway: Viewer;
  try {
    gateway = await openViewer(`${cluster.gatewayUrl.replace(/^http/, 'ws')}${viewPath}/rfb`, {});
  } catch (err) {
    straight.close();
    throw err;
  }
  try {
    await sleep(1000); // both viewers in their stride
    const at = (c: RfbFrameCounter): ViewerCount => ({ updates: c.updates, bytes: c.bytes });
    const cpuBefore = await gatewayCpuSeconds();
    const before = { gateway: at(gateway.counter), straight: at(straight.counter) };
    const started = performance.now();
    await sleep(seconds * 1000);
    const after = { gateway: at(gateway.counter), straight: at(straight.counter) };
    const elapsed = (performance.now() - started) / 1000;
    const cpu = (await gatewayCpuSeconds()) - cpuBefore;
    // A viewer that broke meanwhile stopped counting: no figure rather than a wrong one.
    const broken = gateway.failure() ?? straight.failure();
    if (broken) throw broken;
    const diff = (x: ViewerCount, y: ViewerCount): ViewerCount => ({ updates: x.updates - y.updates, bytes: x.bytes - y.bytes });
    const relayed = diff(after.gateway, before.gateway);
    const gatewayCpuMsPerFrame = relayed.updates > 0 ? (cpu * 1000) / relayed.updates : Number.NaN;
    return { seconds: elapsed, gateway: relayed, straight: diff(after.straight, before.straight), gatewayCpuMsPerFrame };
  } finally {
    gateway.close();
    straight.close();
  }
}

export async function measureGateway(settings: GatewayBenchSettings): Promise<GatewayFigures> {
  const loadBefore = os.loadavg()[0] as number;
  const cluster = await startBenchCluster(settings);
  try {
    const viaGateway = new SandboxClient({ baseUrl: cluster.gatewayUrl, apiKey: cluster.apiKey, fetch: (input, init) => fetch(input, init) });
    // What a gateway adds to a request for a node, and nothing else (no client key: a node never sees one).
    const straightHeaders = { 'x-sbx-cluster-secret': cluster.secret, 'x-sbx-tenant': BENCH_TENANT };
    const straightClient = new SandboxClient({
      baseUrl: cluster.nodeUrl,
      apiKey: '',
      fetch: (input, init) => {
        const headers = new Headers(init?.headers);
        for (const [name, value] of Object.entries(straightHeaders)) headers.set(name, value);
        return fetch(input, { ...init, headers });
      },
    });
    const sandbox = await viaGateway.create({ width: 1024, height: 768 });
    try {
      const straight = new Sandbox(straightClient, sandbox.info);
      let pngBytes = 0;
      console.error(`bench: gateway: ${settings.n} screenshots each way, interleaved`);
      const cpuOf = async (pid: number): Promise<number> => processCpuSeconds(await readFile(`/proc/${pid}/stat`, 'utf8'));
      // The gateway's and the node's CPU over a phase, warm-up included, scaled to the timed requests.
      const phase = async (n: number, a: (i: number) => Promise<unknown>, b: (i: number) => Promise<unknown>): Promise<Timed> => {
        const before = [await cpuOf(cluster.gatewayPid), await cpuOf(cluster.nodePid)] as const;
        await timeInterleaved(0, a, b, WARMUP);
        const ownBefore = await gatewayOwnCpuSeconds(cluster.gatewayUrl);
        const timed = await timeInterleaved(n, a, b, 0);
        const ownAfter = await gatewayOwnCpuSeconds(cluster.gatewayUrl);
        const after = [await cpuOf(cluster.gatewayPid), await cpuOf(cluster.nodePid)] as const;
        const timedShare = n / (n + WARMUP);
        return {
          ...timed,
          gatewayCpuSeconds: (after[0] - before[0]) * timedShare,
          nodeCpuSeconds: (after[1] - before[1]) * timedShare,
          gatewayOwnCpuSeconds: ownAfter - ownBefore,
        };
      };
      const point = (i: number): [number, number] => [100 + (i % 2) * 200, 100 + (i % 2) * 100];
      // Every process's code paths compiled before anything is counted: the first requests through
      // a freshly started gateway cost it several times their CPU (V8 compiling undici, reply-from).
      await timeInterleaved(
        0,
        () => sandbox.screenshot(),
        () => straight.screenshot(),
        JIT_WARMUP,
      );
      await timeInterleaved(
        0,
        (i) => sandbox.mouseMove(...point(i)),
        (i) => straight.mouseMove(...point(i)),
        JIT_WARMUP,
      );
      const shots = await phase(
        settings.n,
        async () => (pngBytes = (await sandbox.screenshot()).length),
        () => straight.screenshot(),
      );
      console.error(`bench: gateway: ${settings.actionN} mouse_move actions each way, interleaved`);
      const actions = await phase(
        settings.actionN,
        (i) => sandbox.mouseMove(...point(i)),
        (i) => straight.mouseMove(...point(i + 1)),
      );
      console.error('bench: gateway: the floor, a bare proxy process against straight, interleaved');
      const floor = await measureHopFloor(cluster.nodeUrl, straightHeaders, sandbox, settings, point);
      console.error(`bench: gateway: live view, a viewer straight and one through the gateway at once, ${settings.liveViewSeconds} s`);
      const view = await measureLiveView(cluster, sandbox, settings.liveViewSeconds, settings.display, () => cpuOf(cluster.gatewayPid));
      return { parts: 'processes', ...gatewayFigures(shots, actions, view, pngBytes), floor, loadAverage: [loadBefore, os.loadavg()[0] as number] };
    } finally {
      await sandbox.destroy().catch(() => undefined);
    }
  } finally {
    await cluster.stop();
  }
}

/**
 * The same screenshots and actions through a bare proxy process (bare-proxy.ts) in front of
 * the node and straight, interleaved: what any one more process on the path costs here.
 */
async function measureHopFloor(
  nodeUrl: string,
  straightHeaders: Record<string, string>,
  sandbox: Sandbox,
  settings: GatewayBenchSettings,
  point: (i: number) => [number, number],
): Promise<HopFloor> {
  const port = await freePort();
  const proxy = spawn(process.execPath, [BARE_PROXY, String(port), nodeUrl], { stdio: ['ignore', 'pipe', 'inherit'] });
  try {
    await once(proxy.stdout, 'data');
    const withHeaders = (baseUrl: string) =>
      new SandboxClient({
        baseUrl,
        apiKey: '',
        fetch: (input, init) => {
          const headers = new Headers(init?.headers);
          for (const [name, value] of Object.entries(straightHeaders)) headers.set(name, value);
          return fetch(input, { ...init, headers });
        },
      });
    const viaProxy = new Sandbox(withHeaders(`http://127.0.0.1:${port}`), sandbox.info);
    const straight = new Sandbox(withHeaders(nodeUrl), sandbox.info);
    await timeInterleaved(
      0,
      () => viaProxy.screenshot(),
      () => straight.screenshot(),
      JIT_WARMUP,
    );
    const shots = await timeInterleaved(
      settings.n,
      () => viaProxy.screenshot(),
      () => straight.screenshot(),
    );
    const actions = await timeInterleaved(
      settings.actionN,
      (i) => viaProxy.mouseMove(...point(i)),
      (i) => straight.mouseMove(...point(i + 1)),
    );
    return {
      screenshotRatio: summarize(shots.a).p50 / summarize(shots.b).p50,
      actionAddedMs: summarize(actions.a).p50 - summarize(actions.b).p50,
    };
  } finally {
    proxy.kill('SIGKILL');
  }
}

/** The gateway's CPU seconds so far as it counts them itself (prom-client's process_cpu_seconds_total: process.cpuUsage()). */
async function gatewayOwnCpuSeconds(gatewayUrl: string): Promise<number> {
  const text = await (await fetch(`${gatewayUrl}/metrics`)).text();
  const line = text.split('\n').find((l) => l.startsWith('process_cpu_seconds_total '));
  if (line === undefined) throw new Error("the gateway's /metrics has no process_cpu_seconds_total");
  return Number(line.slice(line.lastIndexOf(' ') + 1));
}

export function describeGateway(f: GatewayFigures): string {
  const ms = (s: Summary) => `p50 ${s.p50.toFixed(2)} ms (p95 ${s.p95.toFixed(2)}, n ${s.n})`;
  const cpu = (p: Pair) =>
    `; CPU a request: gateway ${p.gatewayCpuMsPerRequest.toFixed(2)} ms (its own count ${p.gatewayOwnCpuMsPerRequest.toFixed(3)} ms), node ${p.nodeCpuMsPerRequest.toFixed(2)} ms`;
  return [
    `gateway (node, gateway and PostgreSQL each its own process; load average ${f.loadAverage[0].toFixed(1)} -> ${f.loadAverage[1].toFixed(1)}):`,
    `  screenshot png 1024x768 (${(f.screenshot.pngBytes / 1024).toFixed(0)} KiB): through the gateway ${ms(f.screenshot.gateway)}, straight ${ms(f.screenshot.straight)}: ratio ${f.screenshot.ratio.toFixed(3)}${cpu(f.screenshot)}`,
    `  mouse_move: through the gateway ${ms(f.action.gateway)}, straight ${ms(f.action.straight)}: added ${f.action.addedMs.toFixed(3)} ms${cpu(f.action)}`,
    `  live view over ${f.liveView.seconds.toFixed(1)} s: through the gateway ${f.liveView.gateway.updates} frames (${(f.liveView.gateway.bytes / 1024).toFixed(0)} KiB), ` +
      `straight ${f.liveView.straight.updates} frames (${(f.liveView.straight.bytes / 1024).toFixed(0)} KiB): ratio ${f.liveView.ratio.toFixed(3)}; ` +
      `the gateway's CPU a frame ${f.liveView.gatewayCpuMsPerFrame.toFixed(3)} ms`,
    `  the floor of one hop (a bare node:http proxy process, same seconds): screenshot ratio ${f.floor.screenshotRatio.toFixed(3)}, mouse_move added ${f.floor.actionAddedMs.toFixed(3)} ms`,
  ].join('\n');
}
