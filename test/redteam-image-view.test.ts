import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { existsSync } from 'node:fs';
import { copyFile, mkdir, mkdtemp, readdir, readFile, rename, rm, unlink, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { Writable } from 'node:stream';
import { after, before, describe, it } from 'node:test';
import { pino } from 'pino';
import { writeContentIndex } from '../src/guest/image/image-integrity.js';
import { imageFor } from '../src/guest/image/templates.js';
import { mountsUnder } from '../src/host/mounts.js';
import { ResourceNames } from '../src/network/names.js';
import { startOrchestrator } from '../src/orchestrator.js';
import { ContainerRuntime } from '../src/runtimes/container/container-runtime.js';
import { containerSettingsFromEnv, ID_RANGE_SIZE } from '../src/runtimes/container/settings.js';
import { run } from '../src/util/exec.js';
import { startTestOrchestrator, TEST_PREFIX, TEST_SUBNET, type TestOrchestrator } from './helpers/orchestrator.js';

/**
 * Red team (issue 21, item 8): the shared guest image must not be reachable for writing, or
 * for deleting, through a session directory. Every session's directory holds an idmapped view
 * of the image's rootfs; a recursive delete of that directory while the view was mounted
 * (read-write, then) emptied the image for every session on the host.
 *
 * The images in the shared images dir are used by everyone on this machine: these tests work
 * on a COPY in a temporary images dir (SBX_IMAGES_DIR). The copy's rootfs is hard-linked
 * (instant, no disk): a name removed in the copy leaves the original's, and nothing here
 * writes into an existing file (a damaged file is replaced by a new one, never rewritten).
 */

const SHARED_IMAGES = process.env.SBX_IMAGES_DIR || '/var/lib/sandboxes/images';

/** Copies a template's image into `imagesDir` (rootfs hard-linked) with a content index of its own. */
async function copyImage(template: string, imagesDir: string): Promise<string> {
  const source = await imageFor(SHARED_IMAGES, template);
  assert.ok(source, `the ${template} image is built in ${SHARED_IMAGES}`);
  const dir = path.join(imagesDir, source.hash);
  assert.ok(!dir.startsWith(SHARED_IMAGES + '/'), 'the copy is not in the shared images dir');
  await mkdir(dir, { mode: 0o755 });
  await run(['cp', '-al', '--', source.rootfs, path.join(dir, 'rootfs')]);
  // Only the rootfs is used by containers; the VM artifacts need only exist.
  for (const file of ['rootfs.ext4', 'vmlinuz', 'initrd.img']) await writeFile(path.join(dir, file), '');
  await copyFile(path.join(source.dir, 'manifest.json'), path.join(dir, 'manifest.json'));
  const manifest = JSON.parse(await readFile(path.join(dir, 'manifest.json'), 'utf8')) as Record<string, unknown>;
  manifest.contents = await writeContentIndex(dir, path.join(dir, 'rootfs'));
  // A new file, renamed over the copied one: never a write into a shared inode.
  await writeFile(path.join(dir, 'manifest.json.new'), JSON.stringify(manifest));
  await rename(path.join(dir, 'manifest.json.new'), path.join(dir, 'manifest.json'));
  return dir;
}

/** Every entry of a tree (files, directories, links), as `find` counts them. */
async function entries(dir: string): Promise<number> {
  return (await run(['find', dir])).stdout.split('\n').filter(Boolean).length;
}

function mountLine(target: string, mountinfo: string): string | undefined {
  return mountinfo.split('\n').find((line) => line.split(' ')[4] === target);
}

async function errnoOf(op: Promise<unknown>): Promise<string | undefined> {
  return op.then(
    () => undefined,
    (err: NodeJS.ErrnoException) => err.code,
  );
}

/** A logger whose lines the test reads back. */
function capturingLogger(): { log: pino.Logger; lines: Array<Record<string, unknown>> } {
  const lines: Array<Record<string, unknown>> = [];
  const sink = new Writable({
    write(chunk: Buffer, _encoding, done) {
      for (const line of chunk.toString().split('\n').filter(Boolean)) lines.push(JSON.parse(line) as Record<string, unknown>);
      done();
    },
  });
  return { log: pino({ level: 'info' }, sink), lines };
}

async function metric(orch: { metrics: { registry: { metrics(): Promise<string> } } }, name: string): Promise<number> {
  const line = (await orch.metrics.registry.metrics()).split('\n').find((l) => l.startsWith(`${name} `));
  return Number(line?.split(' ')[1] ?? NaN);
}

describe('red team: the shared image through a session directory', () => {
  let imagesDir: string;
  let rootfs: string;
  let orch: TestOrchestrator;
  let logged: Array<Record<string, unknown>>;
  let imageEntries: number;

  before(async () => {
    imagesDir = await mkdtemp(path.join(os.tmpdir(), 'sbx-images-copy-'));
    rootfs = path.join(await copyImage('minimal', imagesDir), 'rootfs');
    imageEntries = await entries(rootfs);
    const { log, lines } = capturingLogger();
    logged = lines;
    orch = await startTestOrchestrator({ imagesDir }, false, undefined, log);
  });
  after(async () => {
    await orch?.stop();
    await rm(imagesDir, { recursive: true, force: true });
  });

  async function createSession(): Promise<string> {
    const res = await orch.server.inject({ method: 'POST', url: '/v1/sessions', payload: { width: 640, height: 480 } });
    assert.equal(res.statusCode, 201, res.body);
    return String(res.json().id);
  }

  it('checked the image at start against its content index', () => {
    const checked = logged.find((l) => l.msg === 'guest image checked against its content index');
    assert.ok(checked, 'the start-up log says the image was checked');
    assert.equal(checked.entries, imageEntries);
    console.log(`image check at start: ${String(checked.ms)} ms for ${imageEntries} entries`);
  });

  it('mounts the image view and the config view read-only: a write, delete or rename through them fails with EROFS', async () => {
    const id = await createSession();
    const sessionDir = path.join(orch.stateDir, id);
    const mountinfo = await readFile('/proc/self/mountinfo', 'utf8');
    for (const view of ['image', 'config-view']) {
      const target = path.join(sessionDir, view);
      const line = mountLine(target, mountinfo);
      assert.ok(line, `${view} is mounted`);
      assert.match(line.split(' ')[5] ?? '', /^ro,/, `${view} is mounted read-only: ${line}`);
      assert.match(line, /idmapped/, `${view} is idmapped: ${line}`);
    }
    const image = path.join(sessionDir, 'image');
    assert.equal(await errnoOf(writeFile(path.join(image, 'planted-by-test'), 'x')), 'EROFS', 'a new file');
    assert.equal(await errnoOf(unlink(path.join(image, 'etc', 'hostname'))), 'EROFS', 'a delete');
    assert.equal(await errnoOf(rename(path.join(image, 'etc', 'hostname'), path.join(image, 'etc', 'hostname2'))), 'EROFS', 'a rename');
    assert.equal(await errnoOf(mkdir(path.join(image, 'planted-dir'))), 'EROFS', 'a directory');
    assert.equal(await errnoOf(writeFile(path.join(sessionDir, 'config-view', 'planted'), 'x')), 'EROFS', 'the config view too');
    // rm -rf of the view, as root: nothing goes.
    const rmRes = await run(['rm', '-rf', '--', path.join(image, 'usr')], { allowFailure: true });
    assert.equal(await entries(rootfs), imageEntries, 'not a file of the image lost');
    assert.notEqual(rmRes.exitCode, 0);
    assert.match(rmRes.stderr, /Read-only file system/);
    // The sandbox itself still writes its own disk and answers.
    const bash = await orch.server.inject({
      method: 'POST',
      url: `/v1/sessions/${id}/tools/bash`,
      payload: { command: 'echo hi > /home/user/x && cat /home/user/x' },
    });
    assert.equal(bash.statusCode, 200, bash.body);
    assert.match(bash.body, /hi/);
    assert.equal((await orch.server.inject({ method: 'DELETE', url: `/v1/sessions/${id}` })).statusCode, 200);
    assert.equal(existsSync(sessionDir), false, 'an ordinary destroy removes the session dir');
  });

  it('reclaims a session whose image view is held busy without a single file of the image lost, and removes its dir once free', async () => {
    const id = await createSession();
    const sessionDir = path.join(orch.stateDir, id);
    const view = path.join(sessionDir, 'image');
    // A host process with its working directory in the view: the view cannot be unmounted.
    const holder: ChildProcess = spawn('sleep', ['600'], { cwd: path.join(view, 'etc'), stdio: 'ignore' });
    try {
      const started = performance.now();
      const res = await orch.server.inject({ method: 'DELETE', url: `/v1/sessions/${id}` });
      const destroyMs = performance.now() - started;
      assert.equal(res.statusCode, 200, res.body);
      assert.equal(res.json().state, 'destroyed');
      console.log(`destroy with a busy image view: ${Math.round(destroyMs)} ms`);
      // Left as it is: the view still mounted, the directory there, logged and counted.
      assert.deepEqual(await mountsUnder(sessionDir), [view], 'only the busy view is left mounted');
      assert.deepEqual(await readdir(sessionDir), ['image'], 'the session dir is left with the view alone: its keys are gone');
      assert.equal(await metric(orch, 'sandbox_session_dirs_kept_total'), 1);
      const error = logged.find((l) => l.level === 50 && l.sessionId === id && typeof l.msg === 'string' && l.msg.includes('left on disk'));
      assert.ok(error, 'logged at error');
      assert.deepEqual(error.mounts, [view]);
      assert.equal(await entries(rootfs), imageEntries, 'not a file of the image lost');
      // What emptied the image in issue 21: a recursive delete of the state dir, by hand, now.
      const rmRes = await run(['rm', '-rf', '--', sessionDir], { allowFailure: true });
      assert.equal(await entries(rootfs), imageEntries, 'not a file of the image lost to rm -rf either');
      assert.match(rmRes.stderr, /Read-only file system/);
    } finally {
      holder.kill('SIGKILL');
      if (holder.exitCode === null && holder.signalCode === null) await once(holder, 'exit');
    }
    // A restart reclaims what the ledger kept: the view is free now, so the dir goes.
    await orch.close();
    const again = await startOrchestrator(orch.config, pino({ level: 'silent' }), { buildImageIfMissing: false, listen: false });
    try {
      assert.deepEqual(await mountsUnder(sessionDir), []);
      assert.equal(existsSync(sessionDir), false, 'the session dir is removed once nothing is mounted in it');
      assert.equal(await entries(rootfs), imageEntries, 'the image is whole');
      const create = await again.server.inject({ method: 'POST', url: '/v1/sessions', payload: { width: 640, height: 480 } });
      assert.equal(create.statusCode, 201, `a session of the image still boots: ${create.body}`);
      await again.server.inject({ method: 'DELETE', url: `/v1/sessions/${String(create.json().id)}` });
    } finally {
      await again.close();
    }
  });
});

describe('red team: a damaged image', () => {
  let imagesDir: string;
  before(async () => {
    imagesDir = await mkdtemp(path.join(os.tmpdir(), 'sbx-images-damaged-'));
  });
  after(async () => {
    await rm(imagesDir, { recursive: true, force: true });
  });

  it('is refused at start with what to do, and a create of a damaged template is refused with 503, taking nothing', async () => {
    const minimal = path.join(await copyImage('minimal', imagesDir), 'rootfs');
    const desktop = (await imageFor(SHARED_IMAGES, 'desktop')) ? path.join(await copyImage('desktop', imagesDir), 'rootfs') : undefined;
    // The damage of issue 21 to the copy: its guest init and a directory of programs gone.
    await unlink(path.join(minimal, 'sbin', 'sandbox-init'));
    await rm(path.join(minimal, 'usr', 'share', 'doc'), { recursive: true, force: true });
    const started = performance.now();
    await assert.rejects(startTestOrchestrator({ imagesDir }), (err: Error) => {
      assert.match(
        err.message,
        /the guest image .* is damaged: its guest init \/sbin\/sandbox-init is missing or not executable; \d+ of its \d+ files and directories are missing \([^)]*\/usr\/share\/doc/,
      );
      assert.match(err.message, /stop every orchestrator that uses it, then rebuild it: sbx image build --template minimal --force/);
      return true;
    });
    console.log(`refused a damaged image at start in ${Math.round(performance.now() - started)} ms`);
    if (!desktop) return;
    // A damaged template other than the default: the start goes on, its creates are refused.
    await rm(imagesDir + '/' + path.basename(path.dirname(minimal)), { recursive: true, force: true });
    await copyImage('minimal', imagesDir);
    await unlink(path.join(desktop, 'usr', 'bin', 'xterm')).catch(() => undefined);
    await writeFile(path.join(desktop, 'etc', 'planted'), 'x');
    const orch = await startTestOrchestrator({ imagesDir });
    try {
      const res = await orch.server.inject({ method: 'POST', url: '/v1/sessions', payload: { template: 'desktop' } });
      assert.equal(res.statusCode, 503, res.body);
      assert.equal(res.json().error.code, 'image_damaged');
      // (A 5xx message reaches the client with its paths left out; the log has them.)
      assert.match(res.json().error.message, /is damaged: .*1 added\b.*then rebuild it: sbx image build --template desktop --force/);
      assert.deepEqual(await readdir(orch.stateDir).then((names) => names.filter((n) => /^[a-z0-9]{10}$/.test(n))), [], 'no session dir made');
      const ok = await orch.server.inject({ method: 'POST', url: '/v1/sessions', payload: { width: 640, height: 480 } });
      assert.equal(ok.statusCode, 201, 'the intact default template still boots');
      await orch.server.inject({ method: 'DELETE', url: `/v1/sessions/${String(ok.json().id)}` });
    } finally {
      await orch.stop();
    }
  });
});

describe('red team: host id ranges of two orchestrators that differ only in prefix', () => {
  it('are never the same range, even from the same base, with both creating at once', async () => {
    // The worst case: the same base (the same SBX_CONTAINER_UID_BASE, or two prefixes whose
    // derived bases meet), far above what other sandboxes on this host use.
    const settings = { ...containerSettingsFromEnv(process.env), uidBase: 3_800_000_000 };
    const otherPrefix = `${TEST_PREFIX.slice(0, 2)}${TEST_PREFIX[2] === 'y' ? 'x' : 'y'}-`;
    const third = Number(TEST_SUBNET.split('.')[2]);
    const otherSubnet = `10.242.${(third + 128) % 256}.0/24`;
    const a = await startTestOrchestrator({}, false, { runtime: new ContainerRuntime(new ResourceNames(TEST_PREFIX), settings), reason: 'test' });
    const b = await startTestOrchestrator({ resourcePrefix: otherPrefix, subnet: otherSubnet }, false, {
      runtime: new ContainerRuntime(new ResourceNames(otherPrefix), settings),
      reason: 'test',
    });
    try {
      const create = (o: TestOrchestrator) => o.server.inject({ method: 'POST', url: '/v1/sessions', payload: { width: 640, height: 480 } });
      const [ra, rb] = await Promise.all([create(a), create(b)]);
      assert.equal(ra.statusCode, 201, ra.body);
      assert.equal(rb.statusCode, 201, rb.body);
      const uidMapOf = async (o: TestOrchestrator, id: string) => {
        const pid = Number(await readFile(path.join(o.stateDir, id, 'container.pid'), 'utf8'));
        return (await readFile(`/proc/${pid}/uid_map`, 'utf8')).trim().split(/\s+/).map(Number);
      };
      const [mapA, mapB] = [await uidMapOf(a, String(ra.json().id)), await uidMapOf(b, String(rb.json().id))];
      console.log(`uid_map of ${TEST_PREFIX}'s sandbox: ${mapA.join(' ')}; of ${otherPrefix}'s: ${mapB.join(' ')}`);
      assert.equal(mapA[0], 0);
      assert.equal(mapB[0], 0);
      const [firstA, firstB] = [mapA[1] as number, mapB[1] as number];
      assert.ok(Math.abs(firstA - firstB) >= ID_RANGE_SIZE, `disjoint host ranges: ${firstA} and ${firstB}`);
      // Each held host-wide, in the name of its own orchestrator.
      const leaseOf = async (first: number) => JSON.parse(await readFile(path.join(settings.idLeaseDir, String(first)), 'utf8')) as { stateDir: string };
      assert.equal((await leaseOf(firstA)).stateDir, a.stateDir);
      assert.equal((await leaseOf(firstB)).stateDir, b.stateDir);
      await a.server.inject({ method: 'DELETE', url: `/v1/sessions/${String(ra.json().id)}` });
      await b.server.inject({ method: 'DELETE', url: `/v1/sessions/${String(rb.json().id)}` });
      assert.equal(existsSync(path.join(settings.idLeaseDir, String(firstA))), false, 'given back host-wide at destroy');
      assert.equal(existsSync(path.join(settings.idLeaseDir, String(firstB))), false);
    } finally {
      await a.stop();
      await b.stop();
    }
  });
});
