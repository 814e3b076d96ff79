import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { processCpuSeconds } from '../../src/bench/cpu.js';
import { goalMet, goalRows, type GoalFigures } from '../../src/bench/goals.js';
import { rampPassed } from '../../src/bench/ramp.js';
import type { LoadResult } from '../../src/bench/load.js';
import { gatewayFigures, timeInterleaved } from '../../src/bench/gateway.js';
import { RfbFrameCounter } from '../../src/bench/rfb-counter.js';

const FIGURES: GoalFigures = {
  screenshots: {
    png: { static_ratio_vs_scrot: 0.2, changing_ratio_vs_scrot: 0.5, scaled_1080p_ratio_vs_scrot: 0.3, changing_cpu_ratio_vs_scrot: 0.4 },
    jpeg: { static_ratio_vs_scrot: 0.2, changing_ratio_vs_scrot: 0.3, scaled_1080p_ratio_vs_scrot: 0.3, changing_cpu_ratio_vs_scrot: 0.4 },
    webp: { static_ratio_vs_scrot: 0.2, changing_ratio_vs_scrot: 0.3, scaled_1080p_ratio_vs_scrot: 0.3, changing_cpu_ratio_vs_scrot: 0.6 },
  },
  click_p50_ms: { left_click: 2, right_click: 2, middle_click: 16, double_click: 3, triple_click: 4 },
  load_errors: 0,
  load_p95_ms: 100,
  load_late_ticks_percent: 1,
  load_event_loop_p99_ms: 12,
  ramp_max_sessions: 24,
  idle_session_mib: 39,
  mouse_move_overhead_ms: 1,
  mouse_move_ratio_vs_fresh_ssh: 0.01,
  warm_create_p50_ms: null,
  cold_create_p50_ms: 800,
  recording_cpu_core_percent: 12,
  recording_screenshot_latency_increase_percent: 4,
  run_loop_overhead_ms: 6,
  process_start_first_byte_p50_ms: 12,
  placement_tx_creates_per_second: 640,
  gateway_screenshot_ratio: 1.2,
  gateway_action_added_ms: 0.4,
  gateway_live_view_frames_ratio: 0.97,
  placement_simulation_fullest_vs_ideal: 1.133,
  guest_port_http_added_ms: 1.5,
  guest_port_download_ratio_vs_sftp: 0.7,
  cdp_evaluate_p50_ms: null,
  templates: { desktop: { cold_create_p50_ms: 1800, warm_create_p50_ms: 160, idle_session_mib: 240 } },
  pause_memory_p50_ms: 12,
  resume_memory_p50_ms: null,
};

describe('bench figures', () => {
  it('the goal table carries every figure of issue 13 with its goal, and says which are met', () => {
    const rows = new Map(goalRows(FIGURES).map((r) => [r.label, r]));
    const met = (label: string) => goalMet(rows.get(label) ?? assert.fail(`no row ${label}`));
    assert.equal(met('screenshot png API / scrot, static'), true);
    assert.equal(met('screenshot png API / scrot, changing'), false);
    assert.equal(met('CPU per screenshot png / scrot, changing'), true);
    // Each format has its own rows; JPEG's and WebP's are shown against PNG's goals, for reference (scrot writes a PNG).
    assert.equal(rows.get('screenshot jpeg API / scrot, changing')?.reference, true);
    assert.equal(met('CPU per screenshot webp / scrot, changing'), null, 'a reference row is never "missed"');
    assert.equal(rows.get('CPU per screenshot webp / scrot, changing')?.goal, 0.5);
    assert.equal(met('middle_click API p50'), false, '16 ms is over 15');
    assert.equal(met('guest port GET p50 - same GET in guest'), true, 'issue 24: 1.5 ms added, goal 2');
    assert.equal(met('download via guest port / SFTP'), false, 'higher is better: 0.7 < 0.8');
    assert.equal(met("CDP page.evaluate('1') p50"), null, 'not measured: no Chromium');
    assert.equal(met('triple_click API p50'), true);
    assert.equal(met('create-to-ready p50, cold, desktop'), true, 'issue 14: per template, under 2 s');
    assert.equal(met('create-to-ready p50, warm pool, desktop'), false, '160 ms is over 150');
    assert.equal(met('host memory per idle desktop session'), true);
    assert.equal(met('most sessions, 0 errors, p95 <= 250 ms'), false, 'higher is better: 24 < 32');
    assert.equal(met('host memory per idle session'), true);
    assert.equal(met('create-to-ready p50, warm pool'), null, 'not measured');
    assert.equal(met('run loop per step - direct tool call'), false, '6 ms is over 5');
    assert.equal(rows.get('event-loop delay p99 under the load')?.goal, 10);
    assert.equal(rows.get('load 16 sessions: late ticks')?.goal, 2);
    assert.equal(met('CPU per recorded session, 5 fps, changing'), false, '12% of a core is over 10');
    assert.equal(met('pause (memory) p50'), true, 'issue 25: 12 ms is within 50');
    assert.equal(met('resume (memory) p50'), null, 'not measured (a runtime that cannot pause)');
    assert.equal(met('screenshot latency while recorded, changing'), true);
    assert.equal(met('creates/s, placement transaction (PostgreSQL)'), true, 'higher is better: 640 >= 500');
    // Issue 22's gateway figures and the placement simulation.
    assert.equal(met('screenshot via gateway / straight, p50'), false, '1.2 is over 1.10');
    assert.equal(met('gateway added latency on an action, p50'), true);
    assert.equal(met('live-view frames via gateway / straight'), true, 'higher is better: 0.97 >= 0.95');
    assert.equal(met('fullest node / ideal, 10k/1k simulation'), true);
    assert.equal(met('process start to first output byte, p50'), true, 'issue 24: 12 ms is under 15');
    const unmeasured = new Map(goalRows({ ...FIGURES, gateway_screenshot_ratio: null }).map((r) => [r.label, r]));
    assert.equal(goalMet(unmeasured.get('screenshot via gateway / straight, p50') ?? assert.fail('no row')), null, 'no PostgreSQL: not measured');
  });

  it('a ramp step passes with no error and a p95 up to 250 ms', () => {
    const load = (errors: number, p95Ms: number) => ({ errors, p95Ms }) as LoadResult;
    assert.equal(rampPassed(load(0, 250)), true);
    assert.equal(rampPassed(load(0, 251)), false);
    assert.equal(rampPassed(load(1, 10)), false);
  });

  it('CPU time is read after the command name, which may hold spaces and parentheses', () => {
    // pid (comm) state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime stime ...
    const stat = '4242 (sshd: user (x) y) S 1 1 1 0 -1 4194560 10 0 0 0 250 50 0 0 20 0 1 0';
    assert.equal(processCpuSeconds(stat), 3);
  });

  it('gateway figures: p50 through the gateway / straight, p50 difference, frames through / straight', async () => {
    // Alternating A/B: each side n samples, each going first in half of the rounds.
    const order: string[] = [];
    const timed = await timeInterleaved(
      4,
      async () => void order.push('a'),
      async () => void order.push('b'),
      1,
    );
    assert.equal(timed.a.length, 4);
    assert.equal(timed.b.length, 4);
    assert.deepEqual(order, ['a', 'b', 'b', 'a', 'a', 'b', 'b', 'a', 'a', 'b']);
    const f = gatewayFigures(
      { a: [3, 2.2, 2.4, 9], b: [2, 1.9, 2.1, 8], gatewayCpuSeconds: 0.004, nodeCpuSeconds: 0.016, gatewayOwnCpuSeconds: 0.0012 },
      { a: [1.5, 1.6, 1.7], b: [1.1, 1.2, 1.3], gatewayCpuSeconds: 0.0015, nodeCpuSeconds: 0.003, gatewayOwnCpuSeconds: 0.0003 },
      { seconds: 10, gateway: { updates: 290, bytes: 1 }, straight: { updates: 300, bytes: 1 }, gatewayCpuMsPerFrame: 0.1 },
      22_000,
    );
    assert.equal(f.screenshot.ratio, 2.4 / 2);
    assert.equal(f.screenshot.gatewayCpuMsPerRequest, 1);
    assert.equal(f.screenshot.nodeCpuMsPerRequest, 2, 'the node answered both sides: 8 requests');
    assert.ok(Math.abs(f.action.addedMs - 0.4) < 1e-9, `${f.action.addedMs}`);
    assert.equal(f.action.gatewayCpuMsPerRequest, 0.5);
    assert.ok(
      Math.abs(f.screenshot.gatewayOwnCpuMsPerRequest - 0.3) < 1e-9 && Math.abs(f.action.gatewayOwnCpuMsPerRequest - 0.1) < 1e-9,
      'its own count per timed request',
    );
    assert.equal(f.liveView.ratio, 290 / 300);
    const zero = { a: [1], b: [1], gatewayCpuSeconds: 0, nodeCpuSeconds: 0, gatewayOwnCpuSeconds: 0 };
    const none = gatewayFigures(
      zero,
      zero,
      { seconds: 10, gateway: { updates: 0, bytes: 0 }, straight: { updates: 0, bytes: 0 }, gatewayCpuMsPerFrame: Number.NaN },
      0,
    );
    assert.ok(Number.isNaN(none.liveView.ratio), 'no frame straight: no figure, not a pass');
  });

  it('the raw RFB viewer does the handshake and counts whole FramebufferUpdates, however the bytes are cut', () => {
    const serverInit = Buffer.alloc(24 + 4);
    serverInit.writeUInt16BE(1024, 0);
    serverInit.writeUInt16BE(768, 2);
    serverInit[4] = 32; // bits per pixel
    serverInit.writeUInt32BE(4, 20);
    serverInit.write('name', 24);
    const rect = (w: number, h: number, encoding: number, body: Buffer): Buffer => {
      const header = Buffer.alloc(12);
      header.writeUInt16BE(w, 4);
      header.writeUInt16BE(h, 6);
      header.writeInt32BE(encoding, 8);
      return Buffer.concat([header, body]);
    };
    const update = (...rects: Buffer[]): Buffer => Buffer.concat([Buffer.from([0, 0, rects.length >> 8, rects.length & 255]), ...rects]);
    const zrle = (n: number): Buffer => {
      const length = Buffer.alloc(4);
      length.writeUInt32BE(n);
      return Buffer.concat([length, Buffer.alloc(n, 0xab)]);
    };
    const stream = Buffer.concat([
      Buffer.from('RFB 003.008\n'),
      Buffer.from([1, 1]), // one security type: None
      Buffer.alloc(4), // SecurityResult OK
      serverInit,
      update(rect(1024, 768, 16, zrle(300)), rect(2, 2, 0, Buffer.alloc(16, 0xcd))), // ZRLE and Raw
      Buffer.from([2]), // Bell
      Buffer.from([3, 0, 0, 0, 0, 0, 0, 5, 104, 101, 108, 108, 111]), // ServerCutText "hello"
      update(), // no rectangle
      update(rect(0, 0, -223, Buffer.alloc(0)), rect(64, 64, 0, Buffer.alloc(64 * 64 * 4, 1))), // DesktopSize, then a large Raw
    ]);
    for (const cut of [1, 3, 7, 1000, stream.length]) {
      const sent: Buffer[] = [];
      const counter = new RfbFrameCounter((m) => void sent.push(m));
      for (let i = 0; i < stream.length; i += cut) counter.feed(stream.subarray(i, i + cut));
      assert.equal(counter.updates, 3, `cut every ${cut} bytes`);
      assert.equal(counter.width, 1024);
      assert.equal(counter.height, 768);
      // Version, security None, ClientInit shared, SetEncodings (ZRLE, Raw), a full request, then an incremental one per update.
      assert.deepEqual(sent[0], Buffer.from('RFB 003.008\n'));
      assert.deepEqual(sent[1], Buffer.from([1]));
      assert.deepEqual(sent[2], Buffer.from([1]));
      assert.deepEqual(sent[3], Buffer.from([2, 0, 0, 2, 0, 0, 0, 16, 0, 0, 0, 0]));
      assert.deepEqual(sent[4], Buffer.from([3, 0, 0, 0, 0, 0, 4, 0, 3, 0]));
      assert.equal(sent.length, 5 + 3);
      assert.deepEqual(sent[7], Buffer.from([3, 1, 0, 0, 0, 0, 4, 0, 3, 0]));
    }
    // An encoding it did not ask for cannot be skipped: said, not miscounted.
    const counter = new RfbFrameCounter(() => undefined);
    const handshake = stream.subarray(0, 12 + 2 + 4 + serverInit.length);
    assert.throws(() => counter.feed(Buffer.concat([handshake, update(rect(8, 8, 7, Buffer.alloc(10)))])), /unexpected RFB encoding 7/);
  });
});
