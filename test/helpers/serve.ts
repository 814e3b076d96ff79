import { spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import path from 'node:path';
import { TEST_PREFIX } from './orchestrator.js';

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
