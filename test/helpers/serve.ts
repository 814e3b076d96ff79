import { spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import net from 'node:net';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { TEST_PREFIX, TEST_SUBNET } from './orchestrator.js';

const CLI = path.resolve('dist/cli/main.js');

export interface ServeProcess {
  child: ChildProcess;
  url: string;
  output(): string;
}

/** Runs the real `sbx serve` (the built CLI) as a separate process, as a user would. */
export async function startServe(
  stateDir: string,
  port: number,
  subnet = `10.243.${Math.floor(Math.random() * 256)}.0/24`,
  extraArgs: string[] = [],
  env: Record<string, string> = {},
): Promise<ServeProcess> {
  const child = spawn(process.execPath, [CLI, 'serve', '--port', String(port), '--state-dir', stateDir, '--runtime', 'container', ...extraArgs], {
    env: {
      ...process.env,
      SBX_RESOURCE_PREFIX: TEST_PREFIX,
      SBX_IMAGES_DIR: process.env.SBX_IMAGES_DIR || '/var/lib/sandboxes/images',
      SBX_SUBNET: subnet,
      SBX_LOG_LEVEL: 'info',
      SBX_TEMPLATE: 'minimal',
      ...env,
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let output = '';
  child.stdout?.on('data', (d: Buffer) => (output += d.toString()));
  child.stderr?.on('data', (d: Buffer) => (output += d.toString()));
  const url = `http://127.0.0.1:${port}`;
  const deadline = Date.now() + 30_000;
  while (Date.now() < deadline) {
    if (child.exitCode !== null) throw new Error(`sbx serve exited early:\n${output}`);
    try {
      if ((await fetch(`${url}/healthz`)).ok) return { child, url, output: () => output };
    } catch {
      // not listening yet
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  child.kill('SIGKILL');
  throw new Error(`sbx serve did not start listening:\n${output}`);
}

/** A free TCP port on loopback: a server killed and started again on it keeps its URL. */
export async function freePort(): Promise<number> {
  const server = net.createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as net.AddressInfo;
  await new Promise((resolve) => server.close(resolve));
  return port;
}

/**
 * `sbx serve` on a given port and state dir with the suite's prefix and subnet, its stderr on
 * the test's: for tests that SIGKILL it and start it again over the same state.
 */
export async function startServeOn(
  stateDir: string,
  port: number,
  env: Record<string, string> = {},
  runtime = env.SBX_RUNTIME ?? 'container',
): Promise<ChildProcess> {
  const proc = spawn(process.execPath, [CLI, 'serve', '--host', '127.0.0.1', '--port', String(port), '--state-dir', stateDir, '--runtime', runtime], {
    env: {
      ...process.env,
      SBX_RESOURCE_PREFIX: TEST_PREFIX,
      SBX_SUBNET: TEST_SUBNET,
      SBX_IMAGES_DIR: process.env.SBX_IMAGES_DIR || '/var/lib/sandboxes/images',
      SBX_TEMPLATE: 'minimal',
      SBX_LOG_LEVEL: process.env.SBX_TEST_LOG_LEVEL || 'warn',
      ...env,
    },
    stdio: ['ignore', 'ignore', 'inherit'],
  });
  const deadline = Date.now() + 60_000;
  while (Date.now() < deadline) {
    if (proc.exitCode !== null) throw new Error(`sbx serve exited with ${proc.exitCode}`);
    const up = await fetch(`http://127.0.0.1:${port}/healthz`).then(
      (r) => r.ok,
      () => false,
    );
    if (up) return proc;
    await sleep(200);
  }
  proc.kill('SIGKILL');
  throw new Error('sbx serve did not come up');
}

export function runCli(args: string[], url: string): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return runCliWith(['--url', url, ...args]);
}

/** The built CLI with `args`, this process's environment and `env` on top; its exit code and output. */
export async function runCliWith(args: string[], env: Record<string, string> = {}): Promise<{ code: number | null; stdout: string; stderr: string }> {
  const child = spawn(process.execPath, [CLI, ...args], { env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
  let stdout = '';
  let stderr = '';
  child.stdout?.on('data', (d: Buffer) => (stdout += d.toString()));
  child.stderr?.on('data', (d: Buffer) => (stderr += d.toString()));
  const [code] = (await once(child, 'close')) as [number | null];
  return { code, stdout, stderr };
}
