import { mkdir, mkdtemp } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { pino } from 'pino';
import { SandboxClient, type Sandbox } from '../client/index.js';
import type { GuestImage } from '../guest/image/image-store.js';
import { removeTreeOnOneMount } from '../host/remove-tree.js';
import { ResourceNames } from '../network/names.js';
import type { Accelerator } from '../runtimes/runtime.js';
import { startOrchestrator } from '../orchestrator.js';
import { bareRuncRun, measureWarmClaims, ReadyLog, stepMedians, type StepFigure } from './create-ready.js';
import { firecrackerStandIn } from './firecracker-stand-in.js';
import { measureForks } from './fork-warm.js';
import { bareQemuBoots } from './qemu-floor.js';
import { percentile } from './stats.js';

export interface CreateBenchSettings {
  /** The orchestrator's configuration (the bench's entry point read it). */
  config: Parameters<typeof startOrchestrator>[0];
  /** Creates timed, cold and warm (BENCH_CREATES); unset: 10 on containers, 3 on a VM runtime (a TCG boot takes 10-15 s). */
  creates?: number;
}

/** The VM runtimes' default: 3 creates and 3 forks, each 10-15 s under TCG, and as many bare boots. */
export const VM_CREATES = 3;
export const CONTAINER_CREATES = 10;

export interface CreateFigures {
  runtime: string;
  /** The template every create boots (SBX_TEMPLATE). */
  template: string;
  /** kvm or tcg for a VM runtime; null for containers. */
  accelerator: string | null;
  /** Set when the runtime runs against a stand-in (Firecracker without KVM): what its figures are, and are not. */
  standIn: string | null;
  loadAverage: number[];
  creates: number;
  /** The warm path next to one bare handshake with a fresh key to the same guest: a claim from the pool, or on QEMU a fork from a snapshot. */
  warm: {
    kind: 'pool claim' | 'fork from a snapshot';
    claimP50: number;
    handshakeP50: number;
    ratio: number;
    steps: StepFigure[];
    /** The fork's snapshot, taken once before the forks (QEMU). */
    snapshot?: { ms: number; bytes: number };
  } | null;
  /** The cold create next to its floor: a bare `runc run` to a shell (containers), a bare QEMU boot of the image to a shell (QEMU). */
  cold: {
    kind: 'cold boot' | 'restore of the snapshot base';
    createP50: number;
    floor: string | null;
    floorP50: number | null;
    ratio: number | null;
    steps: StepFigure[];
  };
}

/** `npm run bench -- create`: issue 27's create figures alone, on an orchestrator of their own. */
export async function measureCreateFigures(settings: CreateBenchSettings): Promise<CreateFigures> {
  const stateDir = await mkdtemp(path.join(os.tmpdir(), 'sbx-bench-create-'));
  const log = new ReadyLog();
  const config = { ...settings.config, stateDir, port: 0, warmPoolSize: 0, tenantRequestsPerSecond: 10_000, tenantRequestBurst: 10_000 };
  const snapshotBaseDir = path.join(stateDir, 'firecracker-snapshot-base');
  await mkdir(snapshotBaseDir);
  const standIn =
    config.runtime === 'firecracker'
      ? await firecrackerStandIn(new ResourceNames(config.resourcePrefix), config.runtimes.firecracker, snapshotBaseDir)
      : undefined;
  if (standIn) console.error(`bench: ${standIn.reason}`);
  if (standIn && config.runtimes.firecracker.snapshots)
    console.error('bench: building the snapshot base first (its boot runs under QEMU TCG: a minute or more)');
  const orchestrator = await startOrchestrator(config, pino({ level: 'info' }, log), { buildImageIfMissing: false, ...(standIn ? { runtime: standIn } : {}) });
  try {
    const address = orchestrator.server.server.address();
    if (!address || typeof address === 'string') throw new Error('server has no TCP address');
    const client = new SandboxClient({ baseUrl: `http://127.0.0.1:${address.port}` });
    const manager = orchestrator.manager;
    const runtime = manager.runtimeName;
    const creates = settings.creates ?? (runtime === 'container' ? CONTAINER_CREATES : VM_CREATES);
    const coldFrom = log.ready.length;
    const coldMs: number[] = [];
    let source: Sandbox | undefined;
    let image: GuestImage | undefined;
    let accelerator: Accelerator | null = null;
    console.error(`bench: ${creates} creates (and one first, untimed) on ${runtime}`);
    for (let i = 0; i < creates + 1; i++) {
      const started = performance.now();
      const sandbox = await client.create({ width: 1024, height: 768 });
      if (i > 0) coldMs.push(performance.now() - started);
      const session = manager.registry.find(sandbox.id);
      image ??= session?.image;
      // The stand-in's VMs say kvm (a Firecracker VM's accelerator): its figures are labelled instead.
      if (!standIn) accelerator ??= session?.sandbox?.accelerator ?? null;
      // On QEMU the last one is kept: the forks' source.
      if (runtime === 'qemu' && i === creates) source = sandbox;
      else await sandbox.destroy();
    }
    const coldSteps = stepMedians(coldOnly(log, coldFrom), 'cold');
    let warm: CreateFigures['warm'] = null;
    if (runtime === 'container') {
      const figures = await measureWarmClaims(manager, client, log, stateDir, creates);
      warm = { kind: 'pool claim', ...ratioOf(figures.claimMs, figures.handshakeMs), steps: figures.steps };
    } else if (source) {
      console.error(`bench: a snapshot of the last create, then ${creates} forks from it`);
      const forks = await measureForks(manager, client, log, stateDir, source, creates);
      warm = {
        kind: 'fork from a snapshot',
        ...ratioOf(forks.forkMs, forks.handshakeMs),
        steps: forks.steps,
        snapshot: { ms: forks.snapshotMs, bytes: forks.snapshotBytes },
      };
    }
    let floor: { name: string; ms: number[] } | undefined;
    if (runtime === 'container' && image) {
      floor = { name: 'bare runc run to a shell', ms: await bareRuncRun(config.runtimes.container.runcBin, image.rootfs, creates) };
    } else if (runtime === 'qemu' && image && accelerator) {
      console.error(`bench: ${creates} bare QEMU boots of the image to a shell (and one first, untimed)`);
      const vm = { settings: config.runtimes.qemu, accelerator, memoryMiB: config.memoryLimitMiB, image };
      floor = { name: 'a bare QEMU boot of the image to a shell', ms: await bareQemuBoots(vm, creates) };
    }
    const createP50 = percentile(coldMs, 50);
    const floorP50 = floor && floor.ms.length > 0 ? percentile(floor.ms, 50) : null;
    const restored = coldSteps.some((s) => s.step === 'runtime: snapshot/load and resume');
    return {
      runtime,
      template: config.template,
      accelerator,
      standIn: standIn?.reason ?? null,
      loadAverage: os.loadavg(),
      creates,
      warm,
      cold: {
        kind: restored ? 'restore of the snapshot base' : 'cold boot',
        createP50,
        floor: floor?.name ?? null,
        floorP50,
        ratio: floorP50 ? createP50 / floorP50 : null,
        steps: coldSteps,
      },
    };
  } finally {
    await orchestrator.close();
    await removeTreeOnOneMount(stateDir);
  }
}

/** The cold creates' ready lines after `from`, the first (a warm-up) left out. */
function coldOnly(log: ReadyLog, from: number): ReadyLog {
  const cold = new ReadyLog();
  cold.ready.push(
    ...log.ready
      .slice(from)
      .filter((e) => e.source === 'cold')
      .slice(1),
  );
  return cold;
}

function ratioOf(ms: number[], handshakeMs: number[]): { claimP50: number; handshakeP50: number; ratio: number } {
  const claimP50 = percentile(ms, 50);
  const handshakeP50 = percentile(handshakeMs, 50);
  return { claimP50, handshakeP50, ratio: claimP50 / handshakeP50 };
}

/** The figures as the bench prints them. */
export function describeCreateFigures(f: CreateFigures): string {
  const ms = (v: number | null) => (v === null ? 'n/a' : `${v.toFixed(1)} ms`);
  const how = [
    f.runtime,
    f.accelerator,
    `template ${f.template}`,
    `${f.creates} creates`,
    `load average ${f.loadAverage.map((l) => l.toFixed(2)).join(' ')}`,
  ].filter(Boolean);
  const lines = [`create figures (${how.join('; ')})`];
  if (f.standIn) lines.push(`  ${f.standIn}`);
  const steps = (list: StepFigure[]) => list.map((s) => `    ${s.step.padEnd(52)} ${ms(s.p50)}`);
  if (f.warm) {
    const what = f.warm.kind === 'pool claim' ? 'warm claim' : 'warm path, a fork from a snapshot,';
    lines.push(
      `  ${what} p50 ${ms(f.warm.claimP50)} vs a bare handshake with a fresh key ${ms(f.warm.handshakeP50)}: ratio ${f.warm.ratio.toFixed(2)} (goal <= 1.5)`,
    );
    if (f.warm.snapshot) lines.push(`    (the snapshot, taken once before: ${ms(f.warm.snapshot.ms)}, ${(f.warm.snapshot.bytes / 2 ** 20).toFixed(1)} MiB)`);
    lines.push(...steps(f.warm.steps));
  }
  const what = f.cold.kind === 'cold boot' ? 'cold create' : 'create, a restore of the snapshot base,';
  if (f.cold.floor) {
    lines.push(`  ${what} p50 ${ms(f.cold.createP50)} vs ${f.cold.floor} ${ms(f.cold.floorP50)}: ratio ${f.cold.ratio?.toFixed(2) ?? 'n/a'} (goal <= 2)`);
  } else {
    lines.push(`  ${what} p50 ${ms(f.cold.createP50)} (no floor measured here)`);
  }
  lines.push(...steps(f.cold.steps));
  return lines.join('\n');
}

/** `npm run bench -- create`: measures, prints the table and the JSON. */
export async function printCreateFigures(settings: CreateBenchSettings): Promise<void> {
  const figures = await measureCreateFigures(settings);
  console.log(describeCreateFigures(figures));
  console.log(JSON.stringify(figures, null, 2));
}
