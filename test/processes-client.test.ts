import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import type { AddressInfo } from 'node:net';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { SandboxClient, type Sandbox } from '../src/client/index.js';
import { startTestOrchestrator, type TestOrchestrator } from './helpers/orchestrator.js';

const CLI = path.resolve('dist/cli/main.js');

/** The SDK's sandbox.processes and sandbox.fs, and `sbx exec`, against a real sandbox (issue 24). */
describe('processes and fs from the client SDK and the CLI', { timeout: 300_000 }, () => {
  let orch: TestOrchestrator;
  let base: string;
  let sandbox: Sandbox;

  before(async () => {
    orch = await startTestOrchestrator({}, true);
    base = `http://127.0.0.1:${(orch.server.server.address() as AddressInfo).port}`;
    sandbox = await new SandboxClient({ baseUrl: base }).create({ timeoutSeconds: 600 });
  });
  after(async () => {
    orch?.server.server.closeAllConnections();
    await orch?.stop();
  });

  it('sandbox.processes: start, iterate the output, stdin, list, connect, kill', async () => {
    const proc = await sandbox.processes.start({ argv: ['bash', '-c', 'read -r name; echo "hello $name"; echo oops >&2; exit 4'], stdin: true });
    await proc.stdin('world\n', { eof: true });
    const seen: string[] = [];
    for await (const event of proc) {
      if (event.type === 'stdout' || event.type === 'stderr') seen.push(`${event.type}:${event.data.toString()}`);
      if (event.type === 'exit') seen.push(`exit:${event.exitCode}`);
    }
    assert.deepEqual(seen, ['stdout:hello world\n', 'stderr:oops\n', 'exit:4']);
    const sleeper = await sandbox.processes.start({ cmd: 'echo started; sleep 600' });
    const listed = await sandbox.processes.list();
    assert.deepEqual(
      listed.map((p) => p.pid),
      [sleeper.pid],
    );
    // Another client picks it up by its pid and sees the output so far.
    const again = await new SandboxClient({ baseUrl: base }).connect(sandbox.id).then((s) => s.processes.connect(sleeper.pid));
    const first = await again.output()[Symbol.asyncIterator]().next();
    assert.equal(first.value?.type === 'stdout' && first.value.data.toString(), 'started\n');
    const killed = await again.kill();
    assert.deepEqual({ running: killed.running, signal: killed.signal }, { running: false, signal: 'TERM' });
    const waited = await sleeper.wait();
    assert.deepEqual({ out: waited.stdout.toString(), reason: waited.reason }, { out: 'started\n', reason: 'killed' });
    assert.ok((await sandbox.processes.list({ all: true })).length >= 2);
  });

  it('sandbox.processes.run: started and followed in one request', async () => {
    const events: string[] = [];
    for await (const event of sandbox.processes.run({ argv: ['bash', '-c', 'echo a; echo b >&2; exit 2'] })) {
      if (event.type === 'start') events.push(`start:${event.process.pid > 1}`);
      else if (event.type === 'stdout' || event.type === 'stderr') events.push(`${event.type}:${event.data.toString()}`);
      else if (event.type === 'exit') events.push(`exit:${event.exitCode}`);
    }
    assert.deepEqual(events, ['start:true', 'stdout:a\n', 'stderr:b\n', 'exit:2']);
  });

  it('sandbox.fs: mkdir, stat, list, move, remove, watch', async () => {
    await sandbox.fs.mkdir('/home/user/sdk/dir');
    assert.equal((await sandbox.fs.stat('/home/user/sdk/dir')).type, 'dir');
    const controller = new AbortController();
    const changes = sandbox.fs.watch('/home/user/sdk', { signal: controller.signal })[Symbol.asyncIterator]();
    const firstChange = changes.next();
    await sandbox.fs.move('/home/user/sdk/dir', '/home/user/sdk/renamed');
    const change = await firstChange;
    assert.ok(change.value && ['created', 'removed'].includes(change.value.type));
    controller.abort();
    assert.deepEqual(
      (await sandbox.fs.list('/home/user/sdk')).entries.map((e) => e.name),
      ['renamed'],
    );
    await sandbox.fs.remove('/home/user/sdk', { recursive: true });
    await assert.rejects(sandbox.fs.stat('/home/user/sdk'), { code: 'file_not_found' });
  });

  it('sbx exec streams a command and exits with its code', async () => {
    const child = spawn(
      process.execPath,
      [CLI, '--url', base, 'exec', sandbox.id, '--', 'bash', '-c', 'echo "$1"; echo to-stderr >&2; exit 5', 'x', '; touch /tmp/pwned'],
      { stdio: ['ignore', 'pipe', 'pipe'] },
    );
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    const [code] = (await once(child, 'close')) as [number];
    assert.deepEqual({ code, stdout, stderr }, { code: 5, stdout: '; touch /tmp/pwned\n', stderr: 'to-stderr\n' });
    // --stdin: ours goes to the command's standard input.
    const piped = spawn(process.execPath, [CLI, '--url', base, 'exec', '--stdin', sandbox.id, '--', 'wc', '-c'], { stdio: ['pipe', 'pipe', 'inherit'] });
    let counted = '';
    piped.stdout.on('data', (d: Buffer) => (counted += d.toString()));
    piped.stdin.end('twelve bytes');
    const [pipedCode] = (await once(piped, 'close')) as [number];
    assert.deepEqual({ pipedCode, counted: counted.trim() }, { pipedCode: 0, counted: '12' });
    const check = await sandbox.processes.start({ argv: ['ls', '/tmp'] });
    assert.ok(!(await check.wait()).stdout.toString().includes('pwned'));
  });
});
