/**
 * Where the orchestrator's CPU goes for a screenshot of a changing screen: one 1024x768
 * container session, the bench's changing screen (src/bench/screenshots.ts), N screenshots
 * over the API from a child process (so this process's CPU is the orchestrator's alone), then
 * the same frames grabbed and encoded directly, to split grab from encode.
 * Run as root: node --import tsx scripts/profile-screenshots.ts [N] (add --cpu-prof to profile).
 */
import { fork } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { pino } from 'pino';
import { SandboxClient } from '../src/client/index.js';
import { defaultConfig } from '../src/config.js';
import { startOrchestrator } from '../src/orchestrator.js';
import { openDirect } from '../src/bench/direct.js';
import { ownCpuSeconds, sessionProcessCpu } from '../src/bench/cpu.js';
import { startChangingScreen } from '../src/bench/screenshots.js';
import { timeInGuestWithCpu } from '../src/bench/baselines.js';

const N = Number(process.argv[2] || 100);
const FORMAT = (process.argv[3] || 'png') as 'png';

async function main(): Promise<void> {
  const stateDir = await mkdtemp(path.join(os.tmpdir(), 'sbx-prof-'));
  const config = {
    ...defaultConfig(process.env),
    stateDir,
    port: 0,
    subnet: `10.243.${Math.floor(Math.random() * 256)}.0/24`,
    warmPoolSize: 0,
    resourcePrefix: 'prf-',
  };
  const orchestrator = await startOrchestrator(config, pino({ level: 'warn' }), { buildImageIfMissing: false });
  const address = orchestrator.server.server.address();
  if (!address || typeof address === 'string') throw new Error('no address');
  const baseUrl = `http://127.0.0.1:${address.port}`;
  const client = new SandboxClient({ baseUrl });
  try {
    const sandbox = await client.create({ width: 1024, height: 768 });
    const direct = await openDirect(stateDir, orchestrator.names, sandbox.id);
    const stop = await startChangingScreen(direct, config.display, () => sandbox.screenshot({ format: FORMAT }));
    const procs = [/sbx-capture/, /^sshd: user@/];
    for (let i = 0; i < 3; i++) await sandbox.screenshot({ format: FORMAT });
    const own0 = ownCpuSeconds();
    const g0 = await sessionProcessCpu(orchestrator.names, sandbox.id, procs);
    const child = fork(process.argv[1]!, ['--client', baseUrl, sandbox.id, String(N), FORMAT], { execArgv: ['--import', 'tsx'] });
    const clientResult = await new Promise<{ ms: number; bytes: number; cpu: number }>((resolve) => child.once('message', (m) => resolve(m as never)));
    const own1 = ownCpuSeconds();
    const g1 = await sessionProcessCpu(orchestrator.names, sandbox.id, procs);
    console.log(
      `API: ${N} shots in ${clientResult.ms.toFixed(0)} ms, mean ${(clientResult.bytes / N / 1024).toFixed(1)} KiB; client process CPU ${((clientResult.cpu / N) * 1000).toFixed(2)} ms/shot`,
    );
    console.log(
      `orchestrator CPU ${(((own1 - own0) / N) * 1000).toFixed(2)} ms/shot; guest helper+sshd ${(((g1.seconds - g0.seconds) / N) * 1000).toFixed(2)} ms/shot`,
    );
    const scrot = await timeInGuestWithCpu(direct, config.display, 'scrot -', 30);
    console.log(`scrot CPU ${(scrot.cpuSecondsPerRun * 1000).toFixed(2)} ms/run`);
    if (process.env.SAVE_PNG) (await import('node:fs')).writeFileSync(process.env.SAVE_PNG, await sandbox.screenshot({ format: FORMAT }));
    await stop();
    direct.close();
    await sandbox.destroy();
  } finally {
    await orchestrator.close();
    await rm(stateDir, { recursive: true, force: true });
  }
}

async function clientMain(baseUrl: string, id: string, n: number, format: 'png'): Promise<void> {
  const client = new SandboxClient({ baseUrl });
  const t = performance.now();
  const c0 = process.cpuUsage();
  let bytes = 0;
  for (let i = 0; i < n; i++) bytes += (await client.screenshot(id, { format })).length;
  const c = process.cpuUsage(c0);
  process.send!({ ms: performance.now() - t, bytes, cpu: (c.user + c.system) / 1e6 });
  process.disconnect();
}

if (process.argv[2] === '--client') void clientMain(process.argv[3]!, process.argv[4]!, Number(process.argv[5]), process.argv[6] as 'png');
else
  main().catch((e: unknown) => {
    console.error(e);
    process.exit(1);
  });
