import os from 'node:os';
import { SandboxClient } from '../client/index.js';
import { withOwnOrchestrator, type BenchConfig } from './own-orchestrator.js';
import { summarize, type Summary } from './stats.js';

/** Snapshots and forks (issue 25's goal: a fork, create to ready, no slower than the same template's cold create). */
export interface SnapshotFigures {
  runtime: string;
  /** The source session's cold create, to ready. */
  coldCreateMs: number;
  /** The snapshot request, to its answer (the source runs on). */
  snapshotMs: number;
  snapshotBytes: number;
  /** Each fork's create, to ready (keys rotated, address moved, desktop answering). */
  fork: Summary;
  /** The snapshot request to the first fork ready. */
  snapshotToFirstForkMs: number;
}

/** One cold session, one snapshot of it, `n` forks in turn (each destroyed after it is ready). Null where the runtime cannot snapshot. */
export async function measureSnapshots(client: SandboxClient, n: number): Promise<SnapshotFigures | null> {
  let started = performance.now();
  const source = await client.create({ width: 1024, height: 768 });
  const coldCreateMs = performance.now() - started;
  try {
    await source.screenshot();
    started = performance.now();
    let snapshot;
    try {
      snapshot = await client.snapshots.create(source.id, {});
    } catch (err) {
      if ((err as { code?: string }).code === 'snapshot_unsupported') return null;
      throw err;
    }
    const snapshotMs = performance.now() - started;
    const forks: number[] = [];
    try {
      for (let i = 0; i < n; i++) {
        started = performance.now();
        const fork = await client.create({ snapshot: snapshot.id });
        forks.push(performance.now() - started);
        await fork.destroy();
      }
    } finally {
      await client.snapshots.delete(snapshot.id);
    }
    return {
      runtime: snapshot.runtime,
      coldCreateMs,
      snapshotMs,
      snapshotBytes: snapshot.bytes,
      fork: summarize(forks),
      snapshotToFirstForkMs: snapshotMs + (forks[0] ?? 0),
    };
  } finally {
    await source.destroy();
  }
}

/** `npm run bench -- snapshots`: the snapshot and fork figures alone, `forks` forks, on an orchestrator of its own. */
export async function snapshotsAlone(settings: BenchConfig, forks: number): Promise<void> {
  await withOwnOrchestrator(settings, 'snapshots', async (client, orchestrator) => {
    const figures = await measureSnapshots(client, forks);
    if (!figures) {
      console.log(`the ${orchestrator.manager.runtimeName} runtime cannot snapshot here`);
      return;
    }
    console.log(
      `snapshot ${figures.snapshotMs.toFixed(0)} ms, ${(figures.snapshotBytes / 2 ** 20).toFixed(1)} MiB; fork create to ready p50 ${figures.fork.p50.toFixed(0)} ms ` +
        `(goal <= the cold create, ${figures.coldCreateMs.toFixed(0)} ms); snapshot request to the first fork ready ${figures.snapshotToFirstForkMs.toFixed(0)} ms; ` +
        `load average ${os.loadavg()[0]?.toFixed(1)}`,
    );
    console.log(JSON.stringify({ cores: os.cpus().length, ...figures }, null, 2));
  });
}
