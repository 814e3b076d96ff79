import { setTimeout as sleep } from 'node:timers/promises';
import type { CallToolResult } from '@modelcontextprotocol/sdk/types.js';
import { z } from 'zod';
import { Sandbox, type SandboxClient } from '../client/index.js';
import { jsonResult } from './results.js';
import { sandboxId } from './schemas.js';

/**
 * The process and file tools a model needs (issue 24): start a process, read its output by
 * offset (so a long build is followed in steps, each answer bounded), kill it, list a
 * directory. All through the client, as every other MCP tool.
 */

/** Text of one process_output answer at most (per stream). */
const MCP_OUTPUT_BYTES = 64 * 1024;
const POLL_MS = 100;

const absolutePath = z.string().min(1).max(4096).startsWith('/', 'the path must be absolute (start with /)');
const pid = z.number().int().min(2).max(4_194_304).describe('The pid process_start gave');

export const processStartInput = z
  .strictObject({
    sandbox_id: sandboxId,
    argv: z.array(z.string().max(32_768)).min(1).max(1024).optional().describe('The program and its arguments, each passed as one argument (no shell)'),
    cmd: z.string().min(1).max(100_000).optional().describe('Or a shell command, run as bash -lc'),
    cwd: absolutePath.optional().describe('Working directory (default the home directory)'),
    env: z.record(z.string(), z.string()).optional().describe('Environment variables'),
    timeout_seconds: z.number().int().min(1).max(86_400).optional().describe('Kill it after this long'),
  })
  .refine((input) => (input.argv === undefined) !== (input.cmd === undefined), 'give exactly one of argv or cmd');

export const processOutputInput = z.strictObject({
  sandbox_id: sandboxId,
  pid,
  from: z.number().int().min(0).optional().describe('The byte offset to read from: 0 at first, then next_from of the last answer'),
  wait_seconds: z.number().min(0).max(30).optional().describe('Wait this long for output if there is none yet (default 2)'),
});

export const processKillInput = z.strictObject({ sandbox_id: sandboxId, pid });

export const listFilesInput = z.strictObject({
  sandbox_id: sandboxId,
  path: absolutePath,
  depth: z.number().int().min(1).max(5).optional().describe('Levels down (default 1)'),
});

const box = (client: SandboxClient, id: string) => new Sandbox(client, { id } as Sandbox['info']);

export async function startProcess(client: SandboxClient, input: z.infer<typeof processStartInput>): Promise<CallToolResult> {
  const proc = await box(client, input.sandbox_id).processes.start({
    ...(input.argv ? { argv: input.argv } : { cmd: input.cmd as string }),
    ...(input.cwd ? { cwd: input.cwd } : {}),
    ...(input.env ? { env: input.env } : {}),
    ...(input.timeout_seconds ? { timeoutSeconds: input.timeout_seconds } : {}),
  });
  return jsonResult({ pid: proc.pid, running: proc.info.running, hint: 'read its output with process_output {pid, from: 0}' });
}

/** Output from an offset: what is there now, or the first that comes within wait_seconds, or the exit. */
export async function processOutput(client: SandboxClient, input: z.infer<typeof processOutputInput>): Promise<CallToolResult> {
  const handle = await box(client, input.sandbox_id).processes.connect(input.pid);
  const deadline = Date.now() + (input.wait_seconds ?? 2) * 1000;
  for (;;) {
    const read = await handle.read({ from: input.from ?? 0, maxBytes: MCP_OUTPUT_BYTES });
    const got = read.stdout.length + read.stderr.length + read.dropped > 0;
    if (got || !read.running || Date.now() >= deadline) {
      return jsonResult({
        stdout: read.stdout.toString('utf8'),
        stderr: read.stderr.toString('utf8'),
        next_from: read.next,
        ...(read.dropped > 0 ? { dropped_bytes: read.dropped } : {}),
        more_output: read.more,
        running: read.running,
        ...(read.running ? {} : { exit_code: read.exitCode, signal: read.signal, reason: read.reason }),
      });
    }
    await sleep(POLL_MS);
  }
}

export async function killProcess(client: SandboxClient, input: z.infer<typeof processKillInput>): Promise<CallToolResult> {
  const handle = await box(client, input.sandbox_id).processes.connect(input.pid);
  const info = await handle.kill();
  return jsonResult({ pid: info.pid, running: info.running, exit_code: info.exitCode, signal: info.signal, reason: info.reason });
}

export async function listFiles(client: SandboxClient, input: z.infer<typeof listFilesInput>): Promise<CallToolResult> {
  return jsonResult(await box(client, input.sandbox_id).fs.list(input.path, input.depth ? { depth: input.depth } : {}));
}
