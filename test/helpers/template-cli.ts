import { spawn } from 'node:child_process';
import { readdir, readFile, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { templatesDir } from '../../src/templates/template-store.js';

/** Where the real-tier template tests build (the shared images directory, as `sbx` uses it). */
export const IMAGES_DIR = process.env.SBX_IMAGES_DIR || '/var/lib/sandboxes/images';
const ROOT = path.resolve(import.meta.dirname, '../..');

export interface SbxResult {
  code: number | null;
  stdout: string;
  stderr: string;
}

/** `sbx ...` from the source tree, as a user runs it (`env` over the process's own); resolves with its exit code and output. */
export function sbx(args: string[], onStderr?: (text: string, child: ReturnType<typeof spawn>) => void, env: Record<string, string> = {}): Promise<SbxResult> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, ['--import', 'tsx', path.join(ROOT, 'src/cli/main.ts'), ...args], {
      env: { ...process.env, SBX_IMAGES_DIR: IMAGES_DIR, ...env },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (chunk: Buffer) => (stdout += chunk.toString()));
    child.stderr.on('data', (chunk: Buffer) => {
      stderr += chunk.toString();
      onStderr?.(stderr, child);
    });
    child.on('close', (code) => resolve({ code, stdout, stderr }));
  });
}

export async function writeTemplate(dir: string, file: string, text: string): Promise<string> {
  await writeFile(path.join(dir, file), text);
  return path.join(dir, file);
}

/** What a build leaves in the templates dir about `name`: a pointer, a build, a temp file, a mount. */
export async function leftovers(name: string): Promise<string[]> {
  const dir = templatesDir(IMAGES_DIR);
  const entries = await readdir(dir).catch(() => [] as string[]);
  const found = entries.filter((e) => e.startsWith('.build-') || e.includes(name));
  const mounts = (await readFile('/proc/self/mountinfo', 'utf8')).split('\n').filter((l) => l.includes(`${dir}/.build-`));
  return [...found, ...mounts];
}
