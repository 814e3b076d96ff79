#!/usr/bin/env node
/**
 * `npm run bench`: one session on the default runtime, measured side by side in one run:
 * create-to-ready, screenshot and mouse_move over the HTTP API, the same commands run
 * inside the guest (the floor), and a fresh `ssh` process per command (the naive design).
 * Prints a table and writes bench-results.json.
 */
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { pino } from 'pino';
import { SandboxClient } from '../client/index.js';
import { defaultConfig } from '../config.js';
import { CONFIG_FILES, GUEST_USER } from '../guest/contract.js';
import { guestAddressOf } from '../network/netns.js';
import { startOrchestrator } from '../orchestrator.js';
import { publicKeyBlob } from '../transport/keys.js';
import { GuestConnection } from '../transport/ssh-connection.js';
import { naiveSsh, timeInGuest } from './baselines.js';
import { summarize, timeIt, type Summary } from './stats.js';

const N = Number(process.env.BENCH_N || 50);
const CREATES = Number(process.env.BENCH_CREATES || 5);

async function main(): Promise<void> {
  const stateDir = await mkdtemp(path.join(os.tmpdir(), 'sbx-bench-'));
  const config = { ...defaultConfig(), stateDir, port: 0, subnet: process.env.SBX_SUBNET || '10.244.0.0/16' };
  const orchestrator = await startOrchestrator(config, pino({ level: 'warn' }), { buildImageIfMissing: false });
  const address = orchestrator.server.server.address();
  if (!address || typeof address === 'string') throw new Error('server has no TCP address');
  const client = new SandboxClient({ baseUrl: `http://127.0.0.1:${address.port}` });
  try {
    console.error(`bench: runtime ${orchestrator.manager.runtimeName}, ${os.cpus().length} cores, N=${N}`);

    const createMs = await timeIt(CREATES, async () => (await client.create()).destroy(), 0);
    const sandbox = await client.create({ width: 1024, height: 768 });
    const id = sandbox.id;

    const apiShot = await timeIt(N, () => sandbox.screenshot());
    const apiMove = await timeIt(N, (i) => sandbox.mouseMove(100 + (i % 2) * 200, 100 + (i % 2) * 100));

    const sessionDir = path.join(stateDir, id);
    const keyFile = path.join(sessionDir, 'id_ed25519');
    const hostPublicKey = await readFile(path.join(sessionDir, 'config', CONFIG_FILES.hostKeyPub), 'utf8');
    const guestIp = await guestAddressOf(orchestrator.names, id);
    const direct = new GuestConnection({
      endpoint: { host: guestIp, port: 22 },
      username: GUEST_USER,
      privateKey: await readFile(keyFile, 'utf8'),
      pinnedHostKey: publicKeyBlob(hostPublicKey.trim()),
    });
    await direct.open(10_000);
    const guestShot = await timeInGuest(direct, config.display, 'scrot -', N);
    const guestMove = await timeInGuest(direct, config.display, 'xdotool mousemove $((100 + (i % 2) * 200)) $((100 + (i % 2) * 100))', N);
    direct.close();

    const ssh = await naiveSsh({ keyFile, hostPublicKey, address: guestIp, workDir: stateDir });
    const naiveN = Math.min(N, 20);
    const naiveShot = await timeIt(naiveN, () => ssh(`DISPLAY=:${config.display} scrot -`), 1);
    const naiveMove = await timeIt(naiveN, (i) => ssh(`DISPLAY=:${config.display} xdotool mousemove ${100 + (i % 2) * 200} 100`), 1);
    await sandbox.destroy();

    const rows: Array<[string, Summary]> = [
      ['create-to-ready (cold)', summarize(createMs)],
      ['screenshot, API', summarize(apiShot)],
      ['screenshot, scrot in guest (floor)', summarize(guestShot)],
      ['screenshot, fresh ssh per command', summarize(naiveShot)],
      ['mouse_move, API', summarize(apiMove)],
      ['mouse_move, xdotool in guest (floor)', summarize(guestMove)],
      ['mouse_move, fresh ssh per command', summarize(naiveMove)],
    ];
    console.log(`\n${'operation'.padEnd(40)} ${'n'.padStart(4)} ${'p50 ms'.padStart(9)} ${'p95 ms'.padStart(9)}`);
    for (const [name, s] of rows) {
      console.log(`${name.padEnd(40)} ${String(s.n).padStart(4)} ${s.p50.toFixed(2).padStart(9)} ${s.p95.toFixed(2).padStart(9)}`);
    }
    const shot = summarize(apiShot).p50;
    const move = summarize(apiMove).p50;
    const results = {
      runtime: orchestrator.manager.runtimeName,
      cores: os.cpus().length,
      cold_create_p50_ms: summarize(createMs).p50,
      screenshot_api_p50_ms: shot,
      screenshot_api_p95_ms: summarize(apiShot).p95,
      screenshot_guest_scrot_p50_ms: summarize(guestShot).p50,
      screenshot_fresh_ssh_p50_ms: summarize(naiveShot).p50,
      screenshot_ratio_vs_guest_scrot: shot / summarize(guestShot).p50,
      mouse_move_api_p50_ms: move,
      mouse_move_api_p95_ms: summarize(apiMove).p95,
      mouse_move_guest_p50_ms: summarize(guestMove).p50,
      mouse_move_fresh_ssh_p50_ms: summarize(naiveMove).p50,
      mouse_move_overhead_ms: move - summarize(guestMove).p50,
      mouse_move_ratio_vs_fresh_ssh: move / summarize(naiveMove).p50,
    };
    console.log(
      `\nscreenshot: API/guest scrot = ${results.screenshot_ratio_vs_guest_scrot.toFixed(2)}, ` +
        `API/fresh ssh = ${(shot / results.screenshot_fresh_ssh_p50_ms).toFixed(3)}`,
    );
    console.log(
      `mouse_move: API - guest = ${results.mouse_move_overhead_ms.toFixed(2)} ms, ` +
        `API/fresh ssh = ${results.mouse_move_ratio_vs_fresh_ssh.toFixed(3)}`,
    );
    await writeFile('bench-results.json', JSON.stringify(results, null, 2) + '\n');
    console.error('bench: wrote bench-results.json');
  } finally {
    await orchestrator.close();
    await rm(stateDir, { recursive: true, force: true });
  }
}

main().catch((err: unknown) => {
  console.error(`bench: ${err instanceof Error ? err.stack : String(err)}`);
  process.exit(1);
});
