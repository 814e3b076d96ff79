/**
 * Issue 21, item 5: a guest that floods its bash tool's shell with output between commands,
 * `(cat /dev/urandom | base64 &)`, took a whole core of the orchestrator (every byte
 * decrypted and handled in JavaScript, nobody asking for it) and tripled another tenant's
 * screenshot latency. Performed here for real on real sandboxes: the orchestrator's CPU
 * (process.cpuUsage: this test process is the orchestrator) and another session's
 * screenshot latency, against a control measured in the same run before the flood.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { DEFAULT_BASH_OUTPUT_LIMITS } from '../src/tools/bash/output-budget.js';
import { percentile } from './helpers/host-cost.js';
import { startTestOrchestrator, type TestOrchestrator } from './helpers/orchestrator.js';

interface ToolResult {
  content: Array<{ type: string; text?: string }>;
  is_error: boolean;
}

/** Long enough to average a busy 2-core machine's noise; the flood cost a whole core. */
const IDLE_WINDOW_MS = 4_000;
/**
 * Screenshots are measured in blocks, and a block's CPU per screenshot is the figure: per
 * wall second it counted the pace too (a faster run read as a costlier one: 0.89 -> 1.38 s/s
 * with p50 1.3 -> 0.8 ms, the same CPU per screenshot), and the median of the blocks leaves
 * out the one that a policy check's `ip`/`nft` spawn happened to land in.
 */
const SCREENSHOT_BLOCKS = 7;
const SCREENSHOTS_PER_BLOCK = 30;
/**
 * A smaller budget than the default (8 MiB/s, 64 MiB at once), so that a test command
 * outlasts its burst quickly, and its paced cost (7-16 ms of CPU per MiB here) stays far
 * below the bound however busy the machine.
 */
const BUDGET = { bytesPerSecond: 2 * 2 ** 20, burstBytes: 8 * 2 ** 20 };

describe('red team: an output flood from one guest costs the orchestrator and its neighbours little', () => {
  let orch: TestOrchestrator;
  let flooder: string;
  /** A second flooding session: the issue saw two of them triple another tenant's latency. */
  let second: string;
  let victim: string;

  before(async () => {
    // The request rate limit off: 2 x 210 screenshots in under a second each would meet it (50 a second, bursts of 200).
    orch = await startTestOrchestrator({
      bashOutput: { ...DEFAULT_BASH_OUTPUT_LIMITS, ...BUDGET },
      tenantRequestsPerSecond: 100_000,
      tenantRequestBurst: 100_000,
    });
    flooder = await createSession(orch);
    second = await createSession(orch);
    victim = await createSession(orch);
    // The shells started, the victim's capture warm: none of it is measured.
    for (const id of [flooder, second]) assert.equal(text(await bash(orch, id, { command: 'echo ready' })), 'ready');
    for (let i = 0; i < 5; i++) await screenshot(orch, victim);
  });
  after(async () => {
    await orch?.stop();
  });

  it('background floods between commands in two sessions: orchestrator CPU and a third session near the control; the tool still works', async () => {
    const control = await measure(orch, victim);

    for (const id of [flooder, second]) {
      const started = await bash(orch, id, { command: '(cat /dev/urandom | base64 &)' });
      assert.equal(started.is_error, false, text(started));
    }
    await sleep(1_000); // the flood under way, well past the unread cap
    const flood = await measure(orch, victim);
    const report =
      `idle CPU ${control.idleCpu.toFixed(3)} -> ${flood.idleCpu.toFixed(3)} s/s; ` +
      `screenshots: CPU ${control.shotCpuMs.toFixed(2)} -> ${flood.shotCpuMs.toFixed(2)} ms each, p50 ${control.p50.toFixed(1)} -> ${flood.p50.toFixed(1)} ms`;
    console.log(`output flood: ${report}`);

    // With nothing asked of it, the orchestrator spends next to nothing on the flood (it
    // stops reading the channel at the unread cap; SSH flow control blocks the guest's
    // writer). Before the fix: a whole core (1.0 s/s) on top of the control.
    assert.ok(flood.idleCpu - control.idleCpu < 0.1, `the flood costs the idle orchestrator at most 0.1 core: ${report}`);
    // CPU per screenshot of another session: the same work, plus whatever the flood costs meanwhile.
    assert.ok(flood.shotCpuMs < control.shotCpuMs * 1.3 + 0.3, `the screenshots' CPU stays near the control: ${report}`);
    assert.ok(flood.p50 < control.p50 * 1.5 + 15, `the other session's screenshot p50 stays near the control: ${report}`);

    // The flooding session's own tool still answers: the command ran (its exit status is
    // exact), its output is the flood's and the command's together, clipped and said so.
    const commandStarted = performance.now();
    const during = await bash(orch, flooder, { command: 'echo proof > /tmp/proof; echo command-output; sh -c "exit 3"' });
    const answeredIn = (performance.now() - commandStarted) / 1000;
    console.log(`a command during the flood answered in ${answeredIn.toFixed(1)} s`);
    // Behind it: the flood the channel holds (~4-6 MiB), read at the budget (2 MiB/s here).
    // A marker split by the flood's bytes was never recognised: the command hung to its timeout.
    assert.ok(answeredIn < 20, `a command in the flooding session answers in ${answeredIn.toFixed(1)} s`);
    const tail = text(during).slice(-400);
    assert.ok(/<exit code: 3>$/.test(tail), `the exit status of the command, not of the flood: ...${tail}`);
    assert.ok(/command-output/.test(text(during)) || /<response clipped: \d+ more characters/.test(tail), `its output, or a clip notice: ...${tail}`);
    // A restart kills the flood (it is in the shell's process group); the new shell is clean.
    for (const id of [flooder, second]) assert.equal(text(await bash(orch, id, { restart: true })), 'tool has been restarted.');
    assert.equal(text(await bash(orch, flooder, { command: 'cat /tmp/proof; pgrep -c base64 || true' })), 'proof\n0');

    const metrics = (await orch.server.inject({ method: 'GET', url: '/metrics' })).body;
    const held = Number(/^sandbox_bash_output_throttled_seconds_total\{reason="unread_cap"\} (\S+)$/m.exec(metrics)?.[1] ?? 0);
    assert.ok(held > 1, `the flooding shell was held, counted in the metrics (${held} s)`);
  });

  it('a flood inside a command is read at the output budget: CPU per wall second bounded, the command ends, the output clipped', async () => {
    const bytes = 24_000_000;
    const before = process.cpuUsage();
    const wallStarted = performance.now();
    const result = await bash(orch, flooder, { command: `head -c ${bytes} /dev/zero | tr "\\0" x; echo; echo done` });
    const wall = (performance.now() - wallStarted) / 1000;
    const cpu = cpuSeconds(process.cpuUsage(before));
    const report = `${bytes / 1e6} MB of output in one command: ${wall.toFixed(1)} s, ${cpu.toFixed(2)} CPU s (${(cpu / wall).toFixed(3)} s/s)`;
    console.log(report);
    assert.equal(result.is_error, false);
    assert.match(text(result), /<response clipped: \d+ more characters/);
    assert.ok(text(result).length < 40_000);
    // Past its burst, the shell is read at its rate: the command takes at least that long...
    const paced = (bytes - BUDGET.burstBytes) / BUDGET.bytesPerSecond;
    assert.ok(wall > paced * 0.9, `read at the budget's pace (${paced.toFixed(1)} s at least): ${report}`);
    // ... and costs the orchestrator a small part of a core meanwhile (paced: 0.03 to 0.06;
    // unpaced: 0.3 to 0.65, measured with the throttle disabled and on main).
    assert.ok(cpu / wall < 0.15, `at most 0.15 core while a command floods: ${report}`);
  });
});

interface Measure {
  /** The orchestrator's CPU seconds per wall second with no request in flight. */
  idleCpu: number;
  /** The orchestrator's CPU per screenshot of another session, ms (taken one after another; median of blocks). */
  shotCpuMs: number;
  /** Their median latency, ms. */
  p50: number;
}

async function measure(orch: TestOrchestrator, victim: string): Promise<Measure> {
  let cpu = process.cpuUsage();
  const wall = performance.now();
  await sleep(IDLE_WINDOW_MS);
  const idleCpu = cpuSeconds(process.cpuUsage(cpu)) / ((performance.now() - wall) / 1000);
  const latencies: number[] = [];
  const blockCpuMs: number[] = [];
  for (let block = 0; block < SCREENSHOT_BLOCKS; block++) {
    cpu = process.cpuUsage();
    for (let i = 0; i < SCREENSHOTS_PER_BLOCK; i++) latencies.push(await screenshot(orch, victim));
    blockCpuMs.push((cpuSeconds(process.cpuUsage(cpu)) * 1000) / SCREENSHOTS_PER_BLOCK);
  }
  return { idleCpu, shotCpuMs: percentile(blockCpuMs, 0.5), p50: percentile(latencies, 0.5) };
}

async function screenshot(orch: TestOrchestrator, id: string): Promise<number> {
  const started = performance.now();
  // A changing screen is not needed: the capture path, the PNG encoding and the SSH channel
  // are what a flood on the same host would slow.
  const res = await orch.server.inject({ method: 'GET', url: `/v1/sessions/${id}/screenshot` });
  assert.equal(res.statusCode, 200, res.body);
  return performance.now() - started;
}

async function createSession(orch: TestOrchestrator): Promise<string> {
  const res = await orch.server.inject({ method: 'POST', url: '/v1/sessions', payload: { timeoutSeconds: 600 } });
  assert.equal(res.statusCode, 201, res.body);
  return res.json().id as string;
}

async function bash(orch: TestOrchestrator, id: string, input: object): Promise<ToolResult> {
  const res = await orch.server.inject({ method: 'POST', url: `/v1/sessions/${id}/tools/bash`, payload: input });
  assert.equal(res.statusCode, 200, res.body);
  return res.json<ToolResult>();
}

function text(result: ToolResult): string {
  return result.content.map((c) => c.text ?? '').join('\n');
}

function cpuSeconds(usage: NodeJS.CpuUsage): number {
  return (usage.user + usage.system) / 1e6;
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}
