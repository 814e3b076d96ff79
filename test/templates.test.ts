import assert from 'node:assert/strict';
import { mkdtemp, readdir, rm, stat, statfs, symlink, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { qemuSettingsFromEnv } from '../src/runtimes/qemu/settings.js';
import { QemuRuntime } from '../src/runtimes/qemu/qemu-runtime.js';
import { ResourceNames } from '../src/network/names.js';
import { templatesDir } from '../src/templates/template-store.js';
import { IMAGES_DIR, leftovers, sbx, writeTemplate } from './helpers/template-cli.js';
import { startTestOrchestrator, TEST_PREFIX, type TestOrchestrator } from './helpers/orchestrator.js';

/**
 * User templates for real (issue 14): a template file with an extra package (jq), a file, a
 * build command, env and an autostart app is built with `sbx template build` on the minimal
 * image, listed by the CLI and GET /v1/templates, booted on the container and qemu runtimes
 * (checked inside the guest through the bash tool), kept in its own warm pool, and removed.
 * Broken templates fail naming their step and leave nothing behind. One build per file run;
 * the templates carry this process's prefix, so parallel runs do not meet.
 */
const NAME = `test-tools-${TEST_PREFIX.replace(/[^a-z0-9]/g, '')}`;

interface ToolResult {
  content: Array<{ type: string; text?: string }>;
  is_error: boolean;
}

async function bash(orch: TestOrchestrator, id: string, command: string): Promise<string> {
  const res = await orch.server.inject({ method: 'POST', url: `/v1/sessions/${id}/tools/bash`, payload: { command } });
  assert.equal(res.statusCode, 200, res.body);
  const result = res.json<ToolResult>();
  const text = result.content.map((c) => c.text ?? '').join('\n');
  assert.equal(result.is_error, false, text);
  return text;
}

/** The template's effects, seen from inside the guest. */
async function assertTemplateInside(orch: TestOrchestrator, id: string): Promise<void> {
  assert.match(await bash(orch, id, `echo '{"a":{"b":42}}' | jq .a.b`), /^42$/m, 'the extra package is installed');
  assert.equal((await bash(orch, id, 'cat /opt/greeting/hello.txt')).trim(), 'hello from a template');
  assert.equal((await bash(orch, id, 'stat -c "%U %a" /opt/greeting/hello.txt')).trim(), 'user 640');
  assert.equal((await bash(orch, id, 'cat /etc/template-marker')).trim(), 'built inside');
  assert.equal((await bash(orch, id, 'printf %s "$GREETING"')).trim(), 'hello template world', 'the env reaches the bash tool');
  assert.equal((await bash(orch, id, 'printf %s "$TRICKY"')).trim(), '$(touch /tmp/env-ran) `touch /tmp/env-ran`; echo x', 'as written');
  assert.equal((await bash(orch, id, 'ls /tmp/env-ran 2>&1 || true')).includes('No such file'), true, 'the env value was never run');
}

describe('user templates: build, list, boot, pool, remove', () => {
  let workDir: string;
  let templateFile: string;
  let orch: TestOrchestrator;

  before(async () => {
    workDir = await mkdtemp(path.join(os.tmpdir(), 'sbx-template-'));
    await writeFile(path.join(workDir, 'hello.txt'), 'hello from a template\n');
    templateFile = await writeTemplate(
      workDir,
      'tools.yaml',
      [
        `name: ${NAME}`,
        'base: minimal',
        'packages: [jq]',
        'files:',
        // Nested dot segments that stay in the template's directory are fine.
        '  - source: extras/../hello.txt',
        '    target: /opt/greeting/hello.txt',
        '    mode: "0640"',
        '    owner: user',
        'run:',
        '  - echo "built inside" > /etc/template-marker',
        'env:',
        '  GREETING: hello template world',
        // Data, never code: neither sandbox-init nor the login shell may run this.
        `  TRICKY: '$(touch /tmp/env-ran) \`touch /tmp/env-ran\`; echo x'`,
        'autostart:',
        // -e: no shell in it, so no prompt retitles the window.
        '  - [xterm, -title, autostarted by template, -e, sleep, "3600"]',
        'screen: { width: 1280, height: 800 }',
        '',
      ].join('\n'),
    );
  });
  after(async () => {
    await orch?.stop();
    await sbx(['template', 'rm', NAME]);
    await rm(workDir, { recursive: true, force: true });
  });

  it('builds with progress per step; a changed file makes a new build (the old one goes), the same content is not rebuilt', async () => {
    await writeFile(path.join(workDir, 'hello.txt'), 'an older greeting\n');
    const older = await sbx(['template', 'build', templateFile]);
    assert.equal(older.code, 0, older.stderr);
    const olderDir = older.stdout.trim().split(' ')[2] as string;
    await writeFile(path.join(workDir, 'hello.txt'), 'hello from a template\n');

    const first = await sbx(['template', 'build', templateFile]);
    assert.equal(first.code, 0, first.stderr);
    assert.notEqual(first.stdout, older.stdout, 'a changed file is a new build');
    assert.ok(first.stderr.includes(`removed the previous build ${path.basename(olderDir)}`), first.stderr.slice(-1000));
    assert.ok(!(await readdir(templatesDir(IMAGES_DIR))).includes(path.basename(olderDir)), 'the previous build is gone');
    for (const step of ['[1/7] copy', '[2/7] install packages: jq', '[3/7] copy 1 file', '[4/7] run 1 command', '[6/7] make rootfs.ext4']) {
      assert.ok(first.stderr.includes(step), `progress shows ${step}:\n${first.stderr.slice(-2000)}`);
    }
    // Built in a user namespace through an idmapped mount, the tree on disk is owned as a
    // chroot as root would have left it: root's files by 0, the desktop user's by 1000.
    const rootfs = path.join(first.stdout.trim().split(' ')[2] as string, 'rootfs');
    for (const [file, uid] of [
      ['etc/template-marker', 0],
      ['opt/greeting/hello.txt', 1000],
      ['usr/bin/jq', 0],
      ['etc', 0],
    ] as const) {
      const info = await stat(path.join(rootfs, file));
      assert.deepEqual([info.uid, info.gid], [uid, uid], `${file} on disk`);
    }
    const second = await sbx(['template', 'build', templateFile]);
    assert.equal(second.code, 0, second.stderr);
    assert.match(second.stderr, /is up to date .* not rebuilt/);
    assert.equal(second.stdout, first.stdout, 'the same build');
  });

  it('a template can be the base of another: the derived one has what its base has, and its own', async () => {
    const derivedName = `${NAME}-more`;
    const file = await writeTemplate(
      workDir,
      'more.yaml',
      `name: ${derivedName}\nbase: ${NAME}\nrun:\n  - test -f /opt/greeting/hello.txt && command -v jq && touch /etc/more-marker\n`,
    );
    try {
      const built = await sbx(['template', 'build', file]);
      assert.equal(built.code, 0, built.stderr.slice(-2000));
      assert.match(built.stderr, new RegExp(`on ${NAME} \\(`));
      const ls = JSON.parse((await sbx(['template', 'ls', '--json'])).stdout) as Array<{ name: string; base: string }>;
      assert.equal(ls.find((t) => t.name === derivedName)?.base, NAME);
    } finally {
      const removed = await sbx(['template', 'rm', derivedName]);
      assert.equal(removed.code, 0, removed.stderr);
    }
  });

  it('is listed by `sbx template ls` and GET /v1/templates, with its base and screen', async () => {
    const ls = await sbx(['template', 'ls', '--json']);
    assert.equal(ls.code, 0, ls.stderr);
    const listed = (JSON.parse(ls.stdout) as Array<{ name: string; base: string | null; screen: unknown }>).find((t) => t.name === NAME);
    assert.deepEqual({ base: listed?.base, screen: listed?.screen }, { base: 'minimal', screen: { width: 1280, height: 800 } });

    orch = await startTestOrchestrator({ warmPool: new Map([[NAME, 1]]), warmPoolScreen: { width: 1280, height: 800 } });
    const res = await orch.server.inject({ method: 'GET', url: '/v1/templates' });
    assert.equal(res.statusCode, 200, res.body);
    const templates = res.json().templates as Array<{ name: string; kind: string; base: string | null; sizeBytes: number | null; builtAt: string | null }>;
    assert.deepEqual(templates.find((t) => t.name === 'minimal')?.kind, 'built-in');
    const ours = templates.find((t) => t.name === NAME);
    assert.equal(ours?.kind, 'user');
    assert.equal(ours?.base, 'minimal');
    assert.ok((ours?.sizeBytes ?? 0) > 100e6 && ours?.builtAt, JSON.stringify(ours));
  });

  it('a session on an unknown template is a 400 that lists the templates there are; nothing is taken', async () => {
    // (Not the address leases: the warm pool is leasing in the background meanwhile.)
    const sessions = orch.manager.list().length;
    const res = await orch.server.inject({ method: 'POST', url: '/v1/sessions', payload: { template: 'no-such-template' } });
    assert.equal(res.statusCode, 400, res.body);
    assert.equal(res.json().error.code, 'invalid_request');
    assert.match(res.json().error.message, /template: unknown template "no-such-template"; available: .*minimal/);
    assert.ok(res.json().error.message.includes(NAME), res.body);
    assert.equal(orch.manager.list().length, sessions, 'no session was made');
    assert.deepEqual(orch.manager.capacity.usage().perTenant, {}, 'no capacity slot was taken');
  });

  it("the warm pool keeps the template's own sandboxes, and a claim takes only its template's", async () => {
    const until = async (what: string, check: () => boolean) => {
      const deadline = Date.now() + 90_000;
      while (!check()) {
        if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
        await new Promise((r) => setTimeout(r, 200));
      }
    };
    await until('the template pool to fill', () => orch.manager.warmPoolStatus(NAME).ready.length === 1);
    assert.equal(orch.manager.warmPoolStatus('minimal').ready.length, 0, 'no minimal pool was asked for');
    const [pooledId] = orch.manager.warmPoolStatus(NAME).ready;

    // A minimal session of the pool's size does not take the template's sandbox.
    const minimal = await orch.server.inject({ method: 'POST', url: '/v1/sessions', payload: { template: 'minimal', width: 1280, height: 800 } });
    assert.equal(minimal.statusCode, 201, minimal.body);
    assert.notEqual(minimal.json().id, pooledId);
    assert.equal(minimal.json().template, 'minimal');
    assert.equal((await bash(orch, minimal.json().id, 'command -v jq || echo none')).trim(), 'none', 'minimal has no jq');
    assert.deepEqual(orch.manager.warmPoolStatus(NAME).ready, [pooledId], 'the pooled sandbox is still there');

    // The template's session, at its default screen (1280x800, the pool's), takes it.
    const res = await orch.server.inject({ method: 'POST', url: '/v1/sessions', payload: { template: NAME } });
    assert.equal(res.statusCode, 201, res.body);
    const view = res.json();
    assert.equal(view.id, pooledId, 'the pooled sandbox of the template became the session');
    assert.equal(view.template, NAME);
    assert.deepEqual(view.display, { width: 1280, height: 800 }, "the template's default screen");
    assert.equal((await orch.server.inject({ method: 'GET', url: `/v1/sessions/${view.id}` })).json().template, NAME);
    await assertTemplateInside(orch, view.id);
  });

  it('boots cold on the container runtime, with its autostart app running as the user with its env', async () => {
    const res = await orch.server.inject({ method: 'POST', url: '/v1/sessions', payload: { template: NAME, width: 1024, height: 768 } });
    assert.equal(res.statusCode, 201, res.body);
    const id = res.json().id as string;
    assert.deepEqual(res.json().display, { width: 1024, height: 768 }, 'a size asked for wins over the template screen');
    await assertTemplateInside(orch, id);
    const autostart = await bash(
      orch,
      id,
      'for i in $(seq 50); do pid=$(pgrep -f "autostarted by template") && break; sleep 0.1; done; ' +
        'echo "user=$(stat -c %U /proc/$pid)"; tr "\\0" "\\n" < /proc/$pid/environ | grep ^GREETING=; ' +
        `DISPLAY=:${orch.manager.display} timeout 10 xdotool search --sync --name "autostarted by template" | head -1 | grep -c .`,
    );
    assert.match(autostart, /^user=user$/m);
    assert.match(autostart, /^GREETING=hello template world$/m);
    assert.match(autostart, /^1$/m, 'its window is on the display');
  });

  it('`sbx template rm` is refused while a sandbox runs on it', async () => {
    try {
      const refused = await sbx(['template', 'rm', NAME]);
      assert.notEqual(refused.code, 0);
      assert.match(refused.stderr, /in use by a running sandbox/);
    } finally {
      await orch.stop();
      orch = undefined as unknown as TestOrchestrator;
    }
  });

  it('boots on the qemu runtime (a real microVM) and has its package, file and env', { timeout: 600_000 }, async () => {
    const names = new ResourceNames(TEST_PREFIX);
    const runtime = await QemuRuntime.create(names, qemuSettingsFromEnv(process.env));
    orch = await startTestOrchestrator({ runtime: 'qemu' }, false, { runtime, reason: 'test' });
    try {
      const res = await orch.server.inject({ method: 'POST', url: '/v1/sessions', payload: { template: NAME, timeoutSeconds: 300 } });
      assert.equal(res.statusCode, 201, res.body);
      assert.equal(res.json().runtime, 'qemu');
      assert.equal(res.json().template, NAME);
      await assertTemplateInside(orch, res.json().id);
    } finally {
      await orch.stop();
      orch = undefined as unknown as TestOrchestrator;
    }
  });

  it('`sbx template rm` removes it once nothing runs on it: name, build and listing', async () => {
    const removed = await sbx(['template', 'rm', NAME]);
    assert.equal(removed.code, 0, removed.stderr);
    assert.deepEqual(await leftovers(NAME), []);
    const ls = await sbx(['template', 'ls', '--json']);
    assert.ok(!(JSON.parse(ls.stdout) as Array<{ name: string }>).some((t) => t.name === NAME));
  });
});

describe('broken templates fail naming the step, and leave nothing behind', () => {
  let workDir: string;
  const broken = `test-broken-${TEST_PREFIX.replace(/[^a-z0-9]/g, '')}`;

  before(async () => {
    workDir = await mkdtemp(path.join(os.tmpdir(), 'sbx-template-'));
  });
  after(async () => {
    await sbx(['template', 'rm', broken]);
    await rm(workDir, { recursive: true, force: true });
  });

  it("an unknown package: the install step, with apt's own words", async () => {
    const file = await writeTemplate(workDir, 'pkg.yaml', `name: ${broken}\nbase: minimal\npackages: [no-such-package-sbx]\n`);
    const result = await sbx(['template', 'build', file]);
    assert.notEqual(result.code, 0);
    assert.match(result.stderr, /step "install packages: no-such-package-sbx" failed/);
    assert.match(result.stderr, /Unable to locate package no-such-package-sbx/);
    assert.deepEqual(await leftovers(broken), []);
  });

  it('a failing command: the run step, with the output tail', async () => {
    const file = await writeTemplate(workDir, 'run.yaml', `name: ${broken}\nbase: minimal\nrun:\n  - echo about to fail; exit 3\n`);
    const result = await sbx(['template', 'build', file]);
    assert.notEqual(result.code, 0);
    assert.match(result.stderr, /step "run 1 command\(s\)" failed: exit 3/);
    assert.match(result.stderr, /about to fail/);
    assert.deepEqual(await leftovers(broken), []);
  });

  it("a step writing without end is stopped at the build's disk budget; the build fails and leaves nothing", async () => {
    const file = await writeTemplate(workDir, 'fill.yaml', `name: ${broken}\nbase: minimal\nrun:\n  - dd if=/dev/zero of=/fill bs=1M\n`);
    const before = await statfs(IMAGES_DIR);
    const began = performance.now();
    // The base's copy (about 0.5 GiB) counts: 1 GiB leaves the step about half of one.
    const result = await sbx(['template', 'build', '--max-disk-mib', '1024', file]);
    const after = await statfs(IMAGES_DIR);
    console.log(
      `a step filling the disk: stopped after ${((performance.now() - began) / 1000).toFixed(1)} s; free space ${(((after.bavail - before.bavail) * after.bsize) / 1048576).toFixed(0)} MiB from before once it failed`,
    );
    assert.notEqual(result.code, 0);
    assert.match(
      result.stderr,
      /step "run 1 command\(s\)" failed: the build took more of the host's disk than its budget of 1024 MiB/,
      result.stderr.slice(-1500),
    );
    assert.deepEqual(await leftovers(broken), []);
    // Its tree is gone with it: the free space is back (within what else wrote meanwhile).
    assert.ok((before.bavail - after.bavail) * after.bsize < 256 * 1048576, 'the space the build took is free again');
  });

  it('a build command has no network (only apt does)', async () => {
    const file = await writeTemplate(
      workDir,
      'net.yaml',
      `name: ${broken}\nbase: minimal\nrun:\n  - [sh, -c, "ip -o link | grep -v ' lo:' && exit 9 || echo only-lo; exit 4"]\n`,
    );
    const result = await sbx(['template', 'build', file]);
    assert.match(result.stderr, /only-lo/, result.stderr.slice(-1500));
    assert.match(result.stderr, /failed: exit 4/);
    assert.deepEqual(await leftovers(broken), []);
  });

  it('a source outside the template directory (nested dot segments, a symlink out): refused before anything is built', async () => {
    const outside = await mkdtemp(path.join(os.tmpdir(), 'sbx-outside-'));
    try {
      await writeFile(path.join(outside, 'secret'), 'a host secret\n');
      await symlink(path.join(outside, 'secret'), path.join(workDir, 'link-out'));
      for (const [source, problem] of [
        [`a/../../${path.basename(outside)}/secret`, /files\[0\]\.source: must be a path relative to the template file, inside its directory/],
        ['link-out', new RegExp(`files\\[0\\]\\.source: link-out leads outside ${workDir}`)],
      ] as const) {
        const file = await writeTemplate(
          workDir,
          'out.yaml',
          `name: ${broken}\nbase: minimal\nfiles: [{source: ${JSON.stringify(source)}, target: /etc/stolen}]\n`,
        );
        const result = await sbx(['template', 'build', file]);
        assert.notEqual(result.code, 0);
        assert.match(result.stderr, problem);
        assert.doesNotMatch(result.stderr, /copy the base|a host secret/, 'nothing built, nothing of the file shown');
        assert.deepEqual(await leftovers(broken), []);
      }
    } finally {
      await rm(outside, { recursive: true, force: true });
    }
  });

  it('a bad schema and an unknown base: the fields named, nothing built', async () => {
    const file = await writeTemplate(workDir, 'bad.yaml', `name: ${broken}\nbase: minimal\npackages: ["jq; rm -rf /"]\ncolour: red\n`);
    const result = await sbx(['template', 'build', file]);
    assert.notEqual(result.code, 0);
    assert.match(result.stderr, /packages\[0\] \(line 3\)/);
    assert.match(result.stderr, /colour \(line 4\): is not a known field/);
    const noBase = await writeTemplate(workDir, 'nobase.yaml', `name: ${broken}\nbase: no-such-base\n`);
    const unknownBase = await sbx(['template', 'build', noBase]);
    assert.match(unknownBase.stderr, /base: unknown template "no-such-base" \(built-ins and built user templates: .*minimal/);
    assert.deepEqual(await leftovers(broken), []);
  });

  it('Ctrl-C in the middle of a build stops it and removes the half-built template', async () => {
    const file = await writeTemplate(workDir, 'slow.yaml', `name: ${broken}\nbase: minimal\nrun:\n  - sleep 60\n`);
    let interrupted = false;
    const result = await sbx(['template', 'build', file], (stderr, child) => {
      if (!interrupted && stderr.includes('run[0]: sleep 60')) {
        interrupted = true;
        child.kill('SIGINT');
      }
    });
    assert.ok(interrupted, result.stderr);
    assert.notEqual(result.code, 0);
    assert.match(result.stderr, /interrupted/);
    assert.deepEqual(await leftovers(broken), []);
  });
});
