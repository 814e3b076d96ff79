import { mkdtemp } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { pino } from 'pino';
import { SandboxClient } from '../client/index.js';
import { removeTreeOnOneMount } from '../host/remove-tree.js';
import { startOrchestrator } from '../orchestrator.js';
import { bareRuncRun, measureWarmClaims, ReadyLog, stepMedians, type StepFigure } from './create-ready.js';
import { percentile } from './stats.js';

export interface CreateBenchSettings {
  /** The orchestrator's configuration (the bench's entry point read it). */
  config: Parameters<typeof startOrchestrator>[0];
  /** Creates timed, cold and warm. */
  creates: number;
}

export interface CreateFigures {
  runtime: string;
  loadAverage: number[];
  warm: { claimP50: number; handshakeP50: number; ratio: number; steps: StepFigure[] } | null;
  cold: { createP50: number; floorP50: number | null; ratio: number | null; steps: StepFigure[] };
}

/** `npm run bench -- create`: issue 27's create figures alone, on an orchestrator of their own. */
export async function measureCreateFigures(settings: CreateBenchSettings): Promise<CreateFigures> {
  const stateDir = await mkdtemp(path.join(os.tmpdir(), 'sbx-bench-create-'));
  const log = new ReadyLog();
  const config = { ...settings.config, stateDir, port: 0, warmPoolSize: 0, tenantRequestsPerSecond: 10_000, tenantRequestBurst: 10_000 };
  const orchestrator = await startOrchestrator(config, pino({ level: 'info' }, log), { buildImageIfMissing: false });
  try {
    const address = orchestrator.server.server.address();
    if (!address || typeof address === 'string') throw new Error('server has no TCP address');
    const client = new SandboxClient({ baseUrl: `http://127.0.0.1:${address.port}` });
    const manager = orchestrator.manager;
    const coldFrom = log.ready.length;
    const coldMs: number[] = [];
    let rootfs: string | undefined;
    for (let i = 0; i < settings.creates + 1; i++) {
      const started = performance.now();
      const sandbox = await client.create({ width: 1024, height: 768 });
      if (i > 0) coldMs.push(performance.now() - started);
      rootfs ??= manager.registry.find(sandbox.id)?.image?.rootfs;
      await sandbox.destroy();
    }
    const coldLog = new ReadyLog();
    coldLog.ready.push(
      ...log.ready
        .slice(coldFrom)
        .filter((e) => e.source === 'cold')
        .slice(1),
    );
    const floor = manager.runtimeName === 'container' && rootfs ? await bareRuncRun(config.runtimes.container.runcBin, rootfs, settings.creates) : [];
    const createP50 = percentile(coldMs, 50);
    const floorP50 = floor.length > 0 ? percentile(floor, 50) : null;
    let warm: CreateFigures['warm'] = null;
    if (manager.runtimeName === 'container') {
      const figures = await measureWarmClaims(manager, client, log, stateDir, settings.creates);
      const claimP50 = percentile(figures.claimMs, 50);
      const handshakeP50 = percentile(figures.handshakeMs, 50);
      warm = { claimP50, handshakeP50, ratio: claimP50 / handshakeP50, steps: figures.steps };
    }
    return {
      runtime: manager.runtimeName,
      loadAverage: os.loadavg(),
      warm,
      cold: { createP50, floorP50, ratio: floorP50 ? createP50 / floorP50 : null, steps: stepMedians(coldLog, 'cold') },
    };
  } finally {
    await orchestrator.close();
    await removeTreeOnOneMount(stateDir);
  }
}

/** The figures as the bench prints them. */
export function describeCreateFigures(f: CreateFigures): string {
  const ms = (v: number | null) => (v === null ? 'n/a' : `${v.toFixed(1)} ms`);
  const lines = [`create figures (${f.runtime}; load average ${f.loadAverage.map((l) => l.toFixed(2)).join(' ')})`];
  if (f.warm) {
    lines.push(
      `  warm claim p50 ${ms(f.warm.claimP50)} vs a bare handshake with a fresh key ${ms(f.warm.handshakeP50)}: ratio ${f.warm.ratio.toFixed(2)} (goal <= 1.5)`,
    );
    for (const s of f.warm.steps) lines.push(`    ${s.step.padEnd(44)} ${ms(s.p50)}`);
  }
  lines.push(
    `  cold create p50 ${ms(f.cold.createP50)} vs bare runc run to a shell ${ms(f.cold.floorP50)}: ratio ${f.cold.ratio?.toFixed(2) ?? 'n/a'} (goal <= 2)`,
  );
  for (const s of f.cold.steps) lines.push(`    ${s.step.padEnd(44)} ${ms(s.p50)}`);
  return lines.join('\n');
}

/** `npm run bench -- create`: measures, prints the table and the JSON. */
export async function printCreateFigures(settings: CreateBenchSettings): Promise<void> {
  const figures = await measureCreateFigures(settings);
  console.log(describeCreateFigures(figures));
  console.log(JSON.stringify(figures, null, 2));
}
