/**
 * Runs the node pod's shell hooks (deploy/kubernetes/base/node-daemonset.yaml: the preStop,
 * the undrain init step) for real: sh, curl and awk, against a stand-in agent on loopback
 * that answers /metrics with the session counts a test queues, or against a real agent.
 * `curl` is the real one behind a wrapper that records its arguments and points the hooks'
 * port 8080 at STAND_IN_PORT (the stand-in's unless a test names a real agent's); `sleep`
 * sleeps HOOK_SLEEP_SECONDS, none by default; `sbx` is a stand-in recording its arguments,
 * or the real CLI (dist/cli/main.js). Used by test/unit/kubernetes-node-hooks.test.ts and
 * test/kubernetes-hooks.test.ts.
 */
import { chmodSync, existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { run, type RunResult } from '../../src/util/exec.js';
import { DEPLOY, find, podTemplateOf, renderKustomization, ROOT, shellScriptOf } from './kubernetes-manifests.js';

const pod = podTemplateOf(find(renderKustomization(DEPLOY), 'DaemonSet', 'sbx-node')!)!.spec;
/** The scripts as the DaemonSet holds them. */
export const PRE_STOP = shellScriptOf(pod.containers.find((c) => c.name === 'node')?.lifecycle?.preStop?.exec?.command) as string;
export const UNDRAIN = shellScriptOf(pod.initContainers?.find((c) => c.name === 'undrain')?.command) as string;

/** What the stand-in agent answers on a poll: a session count, or an HTTP status. */
export type Answer = { sessions: number } | { status: number };

export interface HookRun extends RunResult {
  /** The stand-in sbx's calls: its arguments, `|`, the SBX_CLUSTER_DB_URL it saw. */
  sbx: string[];
  /** curl's arguments, one call a line. */
  curl: string[];
}

export interface HookHarness {
  /** The agent's answers to the next polls (then 503). */
  answer(answers: Answer[]): void;
  /** The requests the stand-in agent got since the last run. */
  readonly requests: Array<{ url: string; secret: string | undefined }>;
  run(script: string, env: Record<string, string>): Promise<HookRun>;
  close(): Promise<void>;
}

export async function hookHarness(sbx: 'stand-in' | 'real'): Promise<HookHarness> {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'sbx-k8s-hooks-'));
  const realCurl = (await run(['sh', '-c', 'command -v curl'])).stdout.trim();
  const tool = (name: string, body: string) => {
    writeFileSync(path.join(dir, name), `#!/bin/sh\n${body}\n`);
    chmodSync(path.join(dir, name), 0o755);
  };
  if (sbx === 'real') tool('sbx', `exec ${process.execPath} ${path.join(ROOT, 'dist', 'cli', 'main.js')} "$@"`);
  else tool('sbx', `printf '%s|%s\\n' "$*" "\${SBX_CLUSTER_DB_URL:-}" >> "${dir}/sbx.calls"\nexit "\${FAKE_SBX_EXIT:-0}"`);
  tool(
    'curl',
    `printf '%s\\n' "$*" >> "${dir}/curl.calls"\nfor a; do shift; set -- "$@" "$(printf '%s' "$a" | sed "s/:8080\\//:\${STAND_IN_PORT}\\//")"; done\nexec ${realCurl} "$@"`,
  );
  // The hooks' `sleep 10` between polls: HOOK_SLEEP_SECONDS (none by default).
  tool('sleep', `exec ${(await run(['sh', '-c', 'command -v sleep'])).stdout.trim()} "\${HOOK_SLEEP_SECONDS:-0}"`);

  let queued: Answer[] = [];
  const requests: Array<{ url: string; secret: string | undefined }> = [];
  const server = http.createServer((req, res) => {
    requests.push({ url: req.url ?? '', secret: req.headers['x-sbx-cluster-secret'] as string | undefined });
    const answer = queued.shift() ?? { status: 503 };
    if ('status' in answer) {
      res.writeHead(answer.status).end();
      return;
    }
    res.writeHead(200, { 'content-type': 'text/plain' });
    res.end(
      `# HELP sandbox_sessions_active Sessions\n# TYPE sandbox_sessions_active gauge\nsandbox_sessions_active ${answer.sessions}\nsandbox_sessions_total 9\n`,
    );
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.address() as AddressInfo).port;
  const lines = (f: string) => (existsSync(path.join(dir, f)) ? readFileSync(path.join(dir, f), 'utf8').trim().split('\n') : []);

  return {
    answer: (answers) => {
      queued = [...answers];
    },
    requests,
    async run(script, env) {
      for (const f of ['sbx.calls', 'curl.calls']) rmSync(path.join(dir, f), { force: true });
      requests.length = 0;
      const res = await run(['sh', '-c', script], {
        allowFailure: true,
        timeoutMs: 60_000,
        env: { PATH: `${dir}:${process.env.PATH ?? '/usr/bin:/bin'}`, NODE_IP: '127.0.0.1', STAND_IN_PORT: String(port), ...env },
      });
      return { ...res, sbx: lines('sbx.calls'), curl: lines('curl.calls') };
    },
    async close() {
      await new Promise<void>((resolve) => server.close(() => resolve()));
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
