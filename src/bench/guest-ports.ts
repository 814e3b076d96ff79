import http from 'node:http';
import type { Sandbox, SandboxClient } from '../client/index.js';
import type { GuestTransport } from '../transport/index.js';
import { percentile, summarize, timeIt, type Summary } from './stats.js';

/** Issue 24's figures: a guest port and the desktop's browser through the orchestrator. */
export interface GuestPortFigures {
  /** A small GET to python3's HTTP/1.1 file server in the guest: through the path-based URL, and the same request made in the guest (both kept alive). */
  http: { api: Summary; guest: Summary; addedP50Ms: number };
  /** A file downloaded through the port vs the same file over SFTP (GET .../files), MiB/s, best of three each. */
  download: { mib: number; portMiBps: number; sftpMiBps: number; ratio: number };
  /** page.evaluate('1') over CDP through the orchestrator, p50 ms (null: no Chromium in the desktop image). */
  cdpEvaluateP50Ms: number | null;
}

const PORT = 3000;
const FILE_MIB = 64;

/**
 * The guest's web server: python3's static file server speaking HTTP/1.1 with keep-alive, as
 * a typical dev server does (`python3 -m http.server` speaks HTTP/1.0 and closes every
 * connection, which no proxy can keep alive), and with TCP_NODELAY as Node's servers have:
 * python writes an answer's head and body apart, and without it the body waits for the
 * head's delayed ACK (40 ms) on every kept-alive connection, in the guest as through us.
 */
const GUEST_SERVER =
  'import http.server as s; h = s.SimpleHTTPRequestHandler; h.protocol_version = "HTTP/1.1"; h.disable_nagle_algorithm = True; ' +
  `s.ThreadingHTTPServer(("127.0.0.1", ${PORT}), h).serve_forever()`;

/** The same GET n times in the guest on one kept-alive connection (as the client's through the orchestrator), times printed in ms. */
function guestTimingScript(n: number): string {
  return [
    'import http.client, time',
    'out = []',
    `c = http.client.HTTPConnection("127.0.0.1", ${PORT})`,
    `for i in range(${n + 2}):`,
    '    t = time.perf_counter()',
    '    c.request("GET", "/small.txt")',
    '    c.getresponse().read()',
    '    out.append((time.perf_counter() - t) * 1000)',
    'c.close()',
    'print(" ".join("%.3f" % x for x in out[2:]))',
  ].join('\n');
}

/** GET a URL with a keep-alive agent, reading the body; resolves with the bytes read. */
function get(url: string, agent: http.Agent): Promise<number> {
  return new Promise((resolve, reject) => {
    http
      .get(url, { agent }, (res) => {
        let bytes = 0;
        res.on('data', (c: Buffer) => (bytes += c.length));
        res.on('end', () => (res.statusCode === 200 ? resolve(bytes) : reject(new Error(`HTTP ${res.statusCode} from ${url.split('?')[0]}`))));
        res.on('error', reject);
      })
      .on('error', reject);
  });
}

export async function measureGuestPorts(opts: {
  client: SandboxClient;
  sandbox: Sandbox;
  direct: GuestTransport;
  n: number;
  desktop?: Sandbox;
}): Promise<GuestPortFigures> {
  const { sandbox, direct, n } = opts;
  await direct.exec(`mkdir -p /tmp/bench-www && cd /tmp/bench-www && printf 'hello' > small.txt && head -c ${FILE_MIB}M /dev/urandom > big.bin`, {
    timeoutMs: 60_000,
  });
  const server = await direct.spawn(`cd /tmp/bench-www && exec python3 -c '${GUEST_SERVER}'`);
  server.on('data', () => undefined);
  server.stderr.on('data', () => undefined);
  const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
  try {
    const url = await sandbox.ports.url(PORT, { ttlSeconds: 3600 });
    const fileUrl = (name: string) => url.replace('/?', `/${name}?`);
    for (
      let i = 0;
      i < 100 &&
      !(await get(fileUrl('small.txt'), agent).then(
        () => true,
        () => false,
      ));
      i++
    )
      await new Promise((r) => setTimeout(r, 100));
    const api = await timeIt(n, () => get(fileUrl('small.txt'), agent), 3);
    const inGuest = await direct.exec('python3 -', { stdin: guestTimingScript(n), timeoutMs: 60_000 });
    const guest = inGuest.stdout.toString().trim().split(/\s+/).map(Number);
    const best = async (op: () => Promise<unknown>) => {
      const times: number[] = [];
      for (let i = 0; i < 3; i++) times.push((await timeIt(1, op, 0))[0] as number);
      return FILE_MIB / (Math.min(...times) / 1000);
    };
    const portMiBps = await best(() => get(fileUrl('big.bin'), agent));
    const sftpMiBps = await best(() => sandbox.download('/tmp/bench-www/big.bin'));
    return {
      http: { api: summarize(api), guest: summarize(guest), addedP50Ms: percentile(api, 50) - percentile(guest, 50) },
      download: { mib: FILE_MIB, portMiBps, sftpMiBps, ratio: portMiBps / sftpMiBps },
      cdpEvaluateP50Ms: opts.desktop ? await measureCdp(opts.desktop, n) : null,
    };
  } finally {
    agent.destroy();
    server.close();
  }
}

/** page.evaluate('1') through the cdpUrl; null when the desktop has no Chromium (409). */
async function measureCdp(desktop: Sandbox, n: number): Promise<number | null> {
  const cdp = await desktop.browser().catch((err: { status?: number }) => {
    if (err.status === 409) return undefined;
    throw err;
  });
  if (!cdp) return null;
  // playwright-core is a development dependency: loaded only here, by the bench.
  const { chromium } = await import('playwright-core');
  const browser = await chromium.connectOverCDP(cdp.cdpUrl);
  try {
    const context = browser.contexts()[0] ?? (await browser.newContext());
    const page = context.pages()[0] ?? (await context.newPage());
    return percentile(await timeIt(Math.max(n, 50), () => page.evaluate('1'), 5), 50);
  } finally {
    await browser.close().catch(() => undefined);
    await desktop.closeBrowser();
  }
}

export function describeGuestPorts(f: GuestPortFigures): string {
  return (
    `bench: guest port: GET p50 ${f.http.api.p50.toFixed(2)} ms through the orchestrator, ${f.http.guest.p50.toFixed(2)} ms in the guest (+${f.http.addedP50Ms.toFixed(2)} ms); ` +
    `${f.download.mib} MiB download ${f.download.portMiBps.toFixed(0)} MiB/s through the port, ${f.download.sftpMiBps.toFixed(0)} MiB/s over SFTP (x${f.download.ratio.toFixed(2)}); ` +
    `CDP page.evaluate p50 ${f.cdpEvaluateP50Ms === null ? 'n/a (no Chromium)' : `${f.cdpEvaluateP50Ms.toFixed(2)} ms`}`
  );
}
