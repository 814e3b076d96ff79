import { readdir, readFile } from 'node:fs/promises';
import { setTimeout as sleep } from 'node:timers/promises';
import type { Sandbox } from '../client/index.js';
import type { ResourceNames } from '../network/names.js';
import type { GuestTransport } from '../transport/index.js';
import { ownCpuSeconds, processCpuSeconds, sessionProcessCpu } from './cpu.js';
import { startChangingScreen } from './screenshots.js';
import { summarize, timeIt, type Summary } from './stats.js';

/** The session's processes that work for a recording besides the orchestrator (as for a screenshot). */
const CAPTURE_PROCESSES = [/sbx-capture/, /^sshd: user@/];

/** What recording a session costs, on one kind of screen. */
export interface RecordingCost {
  /** PNG screenshots of the same session, not recorded and recorded. */
  screenshotsAlone: Summary;
  screenshotsRecorded: Summary;
  /** How much slower the recorded session's screenshots are (p50), in percent. */
  latencyIncreasePercent: number;
  /** CPU while recorded minus CPU while not, over the same wall time: fraction of one core (orchestrator + ffmpeg + capture helper and its sshd). */
  cpuCoreFraction: number;
  /** Of which ffmpeg. */
  ffmpegCoreFraction: number;
  /** Of which the session's capture helper and its sshd in the guest. */
  guestCoreFraction: number;
}

export interface RecordingTarget {
  sandbox: Sandbox;
  direct: GuestTransport;
  names: ResourceNames;
  display: number;
  n: number;
  /** How long each CPU window lasts (s). */
  cpuSeconds: number;
}

/** CPU seconds of this process's ffmpeg children (the recorders), by pid. */
async function ffmpegCpu(): Promise<number> {
  let seconds = 0;
  for (const entry of await readdir('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    const stat = await readFile(`/proc/${entry}/stat`, 'utf8').catch(() => '');
    if (!stat.includes('(ffmpeg)')) continue;
    const ppid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
    if (ppid === process.pid) seconds += processCpuSeconds(stat);
  }
  return seconds;
}

/** CPU seconds over `seconds` of wall time: this process, its ffmpeg children, the session's capture processes. */
async function cpuOver(target: RecordingTarget, seconds: number): Promise<{ total: number; ffmpeg: number; guest: number }> {
  const own0 = ownCpuSeconds();
  const ff0 = await ffmpegCpu();
  const guest0 = await sessionProcessCpu(target.names, target.sandbox.id, CAPTURE_PROCESSES);
  await sleep(seconds * 1000);
  const ffmpeg = (await ffmpegCpu()) - ff0;
  const guest = (await sessionProcessCpu(target.names, target.sandbox.id, CAPTURE_PROCESSES)).seconds - guest0.seconds;
  return { total: ownCpuSeconds() - own0 + ffmpeg + guest, ffmpeg, guest };
}

/** Rounds of "not recorded" and "recorded": interleaved, so a machine whose load drifts affects both sides alike. */
const ROUNDS = 3;

/** Lets a recorder start (ffmpeg up, its first frames written) or end (the file closed) outside a CPU window. */
const SETTLE_MS = 500;

/**
 * The CPU of recording: windows not recorded and recorded, alternating which comes first,
 * with nothing else between them. (Screenshots taken between windows left their garbage to be
 * collected in the next window that allocates, which is always a recorded one: on a changing
 * screen that read 12 % of a core for the orchestrator where a count of its threads over the
 * same windows reads 2-3 %.)
 */
async function cpuOf(target: RecordingTarget): Promise<{ idle: number; recorded: number; ffmpeg: number; idleGuest: number; recordedGuest: number }> {
  const window = target.cpuSeconds / ROUNDS;
  const cpu = { idle: 0, recorded: 0, ffmpeg: 0, idleGuest: 0, recordedGuest: 0 };
  const idleWindow = async () => {
    const idle = await cpuOver(target, window);
    cpu.idle += idle.total;
    cpu.idleGuest += idle.guest;
  };
  const recordedWindow = async () => {
    await target.sandbox.startRecording();
    try {
      await sleep(SETTLE_MS);
      const busy = await cpuOver(target, window);
      cpu.recorded += busy.total;
      cpu.ffmpeg += busy.ffmpeg;
      cpu.recordedGuest += busy.guest;
    } finally {
      await target.sandbox.stopRecording();
    }
    await sleep(SETTLE_MS);
  };
  for (let round = 0; round < ROUNDS; round++) {
    if (round % 2 === 0) {
      await idleWindow();
      await recordedWindow();
    } else {
      await recordedWindow();
      await idleWindow();
    }
  }
  return cpu;
}

async function costOn(target: RecordingTarget): Promise<RecordingCost> {
  const cpu = await cpuOf(target);
  const shot = () => target.sandbox.screenshot({ format: 'png' });
  const perRound = Math.max(5, Math.ceil(target.n / ROUNDS));
  const alone: number[] = [];
  const recorded: number[] = [];
  for (let round = 0; round < ROUNDS; round++) {
    alone.push(...(await timeIt(perRound, shot, 1)));
    await target.sandbox.startRecording();
    try {
      await sleep(SETTLE_MS);
      recorded.push(...(await timeIt(perRound, shot, 1)));
    } finally {
      await target.sandbox.stopRecording();
    }
  }
  const a = summarize(alone);
  const r = summarize(recorded);
  return {
    screenshotsAlone: a,
    screenshotsRecorded: r,
    latencyIncreasePercent: ((r.p50 - a.p50) / a.p50) * 100,
    cpuCoreFraction: (cpu.recorded - cpu.idle) / target.cpuSeconds,
    ffmpegCoreFraction: cpu.ffmpeg / target.cpuSeconds,
    guestCoreFraction: (cpu.recordedGuest - cpu.idleGuest) / target.cpuSeconds,
  };
}

/**
 * What recording a 1024x768 session at the default 5 fps costs: the CPU (a fraction of one
 * core, the recording's marginal cost over the same session not recorded) and the effect on
 * the same session's screenshot latency, on the screen as it is and on one changing every frame.
 */
export async function measureRecording(target: RecordingTarget): Promise<{ static: RecordingCost; changing: RecordingCost }> {
  const staticScreen = await costOn(target);
  const stop = await startChangingScreen(target.direct, target.display, () => target.sandbox.screenshot());
  try {
    return { static: staticScreen, changing: await costOn(target) };
  } finally {
    await stop();
  }
}
