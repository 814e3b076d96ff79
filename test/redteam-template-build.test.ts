import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { chmod, mkdtemp, readdir, readFile, rm, stat, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { performance } from 'node:perf_hooks';
import { after, before, describe, it } from 'node:test';
import { buildIdBase } from '../src/runtimes/container/id-leases.js';
import { BUILD_ID_RANGES, BuildContainer } from '../src/templates/build-container.js';
import { fenceHostFromBuilds } from '../src/templates/build-fence.js';
import { networkSettingsFromEnv } from '../src/network/settings.js';
import { ID_RANGE_SIZE } from '../src/runtimes/container/settings.js';
import { removeTree } from '../src/guest/image/build-dirs.js';
import { TemplateCatalogue } from '../src/templates/catalogue.js';
import { createNetLab, listenOn } from './helpers/netlab.js';
import { run } from '../src/util/exec.js';
import { templatesDir } from '../src/templates/template-store.js';
import { TEST_PREFIX } from './helpers/orchestrator.js';
import { IMAGES_DIR, leftovers, sbx, writeTemplate, type SbxResult } from './helpers/template-cli.js';

/**
 * Red team: a template someone else wrote, built by an operator (issue 21 item 3). Each
 * template is on `minimal` with one hostile `run` step that tries to reach the host, prints
 * what it got, and exits 7, so the build stops at that step (no disk image is made: the
 * tests stay small) and the step is known to have run to its end. What is asserted is the
 * host: the files the step tries to write there are absent, its sysctls and hostname are
 * as they were, no mount of ours appeared, and no byte of the host's disk or files came
 * out. The step runs as the image's root in a build container (templates/build-container.ts):
 * with the old `unshare ... chroot` as host root, each of these changed the host.
 */
const NAME = `test-hostile-${TEST_PREFIX.replace(/[^a-z0-9]/g, '')}`;
const tag = `${process.pid}-${Math.random().toString(36).slice(2, 8)}`;
/** Where the steps try to leave a mark on the host (on the root file system, not a tmpfs). */
const MARKER = `/var/tmp/sbx-redteam-build-${tag}`;
/** A file only the host has, which an escaped step would print. */
const HOST_SECRET = `/var/tmp/sbx-redteam-secret-${tag}`;
const SECRET_TEXT = `host-only-${tag}`;
/** Sysctls the steps try to change: harmless values, put back if a test ever changed them. */
const STAT_INTERVAL = '/proc/sys/vm/stat_interval';
const KSM_PAGES = '/sys/kernel/mm/ksm/pages_to_scan';

/**
 * A disk of the host's that host root can read and mount: a loop device over a small ext4
 * image of the test's own, holding the secret. (The machine's own disk may be closed even to
 * host root, as it is on the test VMs: a read refused there proves nothing.)
 */
const DISK_IMAGE = `/var/tmp/sbx-redteam-disk-${tag}.img`;
interface HostDisk {
  path: string;
  major: number;
  minor: number;
}

function attachDisk(): HostDisk {
  const content = `${DISK_IMAGE}.d`;
  execFileSync('mkdir', ['-p', content]);
  execFileSync('sh', ['-c', 'printf "%s\\n" "$1" > "$2/secret.txt"', 'sh', SECRET_TEXT, content]);
  execFileSync('truncate', ['-s', '8M', DISK_IMAGE]);
  execFileSync('mkfs.ext4', ['-q', '-d', content, DISK_IMAGE]);
  execFileSync('rm', ['-rf', content]);
  const device = execFileSync('losetup', ['--find', '--show', DISK_IMAGE]).toString().trim();
  const [major, minor] = execFileSync('stat', ['-c', '%t %T', device])
    .toString()
    .trim()
    .split(' ')
    .map((hex) => parseInt(hex, 16));
  return { path: device, major: major as number, minor: minor as number };
}

/** The names in the root directory of the test disk, read from the image (not mounted). */
function diskRootNames(): string {
  return execFileSync('debugfs', ['-R', 'ls -l /', DISK_IMAGE], { stdio: ['ignore', 'pipe', 'ignore'] }).toString();
}

/** The step's own output: the lines it printed (indented by four spaces; a progress line has at most three), not its command line. */
function stepOutput(result: SbxResult): string {
  return result.stderr
    .split('\n')
    .filter((line) => /^ {4}/.test(line))
    .join('\n');
}

async function hostMounts(): Promise<string> {
  return readFile('/proc/self/mountinfo', 'utf8');
}

describe('red team: a hostile template build step changes nothing on the host', () => {
  let workDir: string;
  const before_ = { statInterval: '', ksmPages: '', hostname: '' };
  let disk: HostDisk;
  const timings: string[] = [];

  /** Builds a one-step template; returns what its step printed. */
  async function buildStep(label: string, step: string, onStderr?: Parameters<typeof sbx>[1]): Promise<string> {
    const file = await writeTemplate(workDir, `${label}.yaml`, `name: ${NAME}\nbase: minimal\nrun:\n  - ${JSON.stringify(step)}\n`);
    const started = performance.now();
    const result = await sbx(['template', 'build', file], onStderr);
    timings.push(`${label} ${((performance.now() - started) / 1000).toFixed(1)} s`);
    // Ran to its end (exit 7), inside; then the half-built template is gone.
    assert.match(result.stderr, /step "run 1 command\(s\)" failed: exit 7/, result.stderr.slice(-3000));
    assert.deepEqual(await leftovers(NAME), []);
    return stepOutput(result);
  }

  before(async () => {
    workDir = await mkdtemp(path.join(os.tmpdir(), 'sbx-hostile-'));
    await writeFile(HOST_SECRET, `${SECRET_TEXT}\n`, { mode: 0o644 });
    before_.statInterval = (await readFile(STAT_INTERVAL, 'utf8')).trim();
    before_.ksmPages = existsSync(KSM_PAGES) ? (await readFile(KSM_PAGES, 'utf8')).trim() : '';
    before_.hostname = os.hostname();
    disk = attachDisk();
    // The control: host root reads the disk and finds the secret on it.
    assert.ok(execFileSync('head', ['-c', '8M', disk.path], { maxBuffer: 16 * 2 ** 20 }).includes(SECRET_TEXT), 'the test disk holds the secret');
  });
  after(async () => {
    // Put back whatever a broken build changed, so that a failure here harms no other test.
    if ((await readFile(STAT_INTERVAL, 'utf8')).trim() !== before_.statInterval) await writeFile(STAT_INTERVAL, `${before_.statInterval}\n`);
    if (before_.ksmPages && (await readFile(KSM_PAGES, 'utf8')).trim() !== before_.ksmPages) await writeFile(KSM_PAGES, `${before_.ksmPages}\n`);
    if (os.hostname() !== before_.hostname) execFileSync('hostname', [before_.hostname]);
    await rm(MARKER, { force: true, recursive: true });
    if (disk) execFileSync('losetup', ['-d', disk.path]);
    await rm(DISK_IMAGE, { force: true });
    await rm(HOST_SECRET, { force: true });
    await rm(workDir, { recursive: true, force: true });
    await sbx(['template', 'rm', NAME]);
    console.log(`# hostile builds (copy of minimal's rootfs, one step, clean-up): ${timings.join(', ')}`);
  });

  it("runs as a host uid of the builds' own range, with no capability over the host, seccomp on, no new privileges", async () => {
    const output = await buildStep('whoami', 'cat /proc/self/uid_map; grep -E "^(Seccomp|NoNewPrivs):" /proc/self/status; hostname; exit 7');
    const [inside, outside, count] = (/^\s+(\d+)\s+(\d+)\s+(\d+)$/m.exec(output) ?? []).slice(1).map(Number);
    const first = buildIdBase();
    assert.equal(inside, 0);
    assert.ok(
      outside !== undefined && outside >= first && outside < first + BUILD_ID_RANGES * 65536,
      `root inside is host uid ${outside}, not one of the build ranges from ${first}`,
    );
    assert.equal(count, 65536);
    assert.match(output, /Seccomp:\s+2/);
    assert.match(output, /NoNewPrivs:\s+1/);
    assert.match(output, /^\s+template-build$/m, 'a hostname of its own');
  });

  it("takes no more inotify instances than a session's user may: its namespace's limit is set before it runs", async () => {
    // Before, a build step's user namespace had no limit: it took until host root's ran out.
    const grab =
      'import ctypes, itertools; l = ctypes.CDLL(None); print("held", sum(1 for _ in itertools.takewhile(lambda i: l.inotify_init() >= 0, range(100000))))';
    const output = await buildStep('inotify', `python3 -c '${grab}'; exit 7`);
    const held = Number(/held (\d+)/.exec(output)?.[1]);
    console.log(`# a build step held ${held} inotify instances`);
    assert.ok(held > 0 && held <= 128, `held ${held}`);
  });

  it('costs one container start per step (measured over 10 trivial steps)', async (t) => {
    const file = await writeTemplate(workDir, 'steps.yaml', `name: ${NAME}\nbase: minimal\nrun:\n${'  - "true"\n'.repeat(10)}  - exit 7\n`);
    const result = await sbx(['template', 'build', file]);
    assert.match(result.stderr, /step "run 11 command\(s\)" failed: exit 7/, result.stderr.slice(-2000));
    const at = (index: number) => Number(new RegExp(`^\\s*([\\d.]+)s   run\\[${index}\\]`, 'm').exec(result.stderr)?.[1]);
    const perStep = (at(10) - at(0)) / 10;
    t.diagnostic(`one build step (a runc container start, run and delete): ${(perStep * 1000).toFixed(0)} ms on average over 10`);
    // Generous (a busy shared host): a container start is ~0.1-0.3 s; this catches a step that waits on something.
    assert.ok(perStep < 3, `${perStep} s per step`);
    assert.deepEqual(await leftovers(NAME), []);
  });

  it('the chroot escape (mkdir, chroot, fchdir, chdir .. many times, chroot .) lands in the image, not on the host', async () => {
    // One line (a template's strings have no newlines): python3 is in every image.
    const escape = [
      'import os',
      "os.makedirs('/tmp/jail', exist_ok=True)",
      "fd = os.open('/', os.O_RDONLY)",
      "os.chroot('/tmp/jail')",
      'os.fchdir(fd)',
      "[os.chdir('..') for _ in range(256)]",
      "os.chroot('.')",
      "print('escaped-to', open('/etc/hostname').read().strip())",
      `print('secret', open(${JSON.stringify(HOST_SECRET)}).read().strip() if os.path.exists(${JSON.stringify(HOST_SECRET)}) else 'absent')`,
      `open(${JSON.stringify(MARKER)}, 'w').write('escaped')`,
      "print('wrote-marker')",
    ].join('; ');
    const output = await buildStep('chroot-escape', `python3 -c ${shellQuote(escape)}; exit 7`);
    // The chroot calls themselves work (CAP_SYS_CHROOT in its namespace), and lead nowhere.
    assert.match(output, /escaped-to sandbox$/m, "the image's /etc/hostname, not the host's");
    assert.match(output, /secret absent$/m);
    assert.ok(!output.includes(SECRET_TEXT), 'no byte of the host file came out');
    assert.equal(existsSync(MARKER), false, `${MARKER} must not exist on the host`);
    assert.equal(os.hostname(), before_.hostname);
  });

  it('mount: a tmpfs, a bind of /, a host disk (to write on it), a new namespace: each refused', async () => {
    const { major, minor } = disk;
    const step = [
      `try() { if "$@" >/dev/null 2>&1; then echo "ALLOWED: $*"; else echo "refused: $*"; fi; }`,
      `try mount -t tmpfs sbx-redteam-${tag} /mnt`,
      'try mount --bind / /mnt',
      'try mount -t proc proc /mnt',
      `try mknod /tmp/hostdisk b ${major} ${minor}`,
      `try sh -c 'mount /tmp/hostdisk /mnt && touch /mnt/marker-${tag}'`,
      'try unshare -m true',
      'try unshare -U -m -r true',
      'exit 7',
    ].join('; ');
    const mountsBefore = (await hostMounts()).split('\n').length;
    const output = await buildStep('mount', step);
    assert.doesNotMatch(output, /ALLOWED/, output);
    assert.equal((output.match(/refused: /g) ?? []).length, 7);
    assert.ok(diskRootNames().includes('secret.txt'), 'the disk is readable');
    assert.ok(!diskRootNames().includes(`marker-${tag}`), 'nothing was written on the host disk');
    assert.ok(!(await hostMounts()).includes(`sbx-redteam-${tag}`), 'no mount of the step reached the host');
    console.log(`# host mount table: ${mountsBefore} lines before, ${(await hostMounts()).split('\n').length} after (other tests run meanwhile)`);
  });

  it('mknod of a block device, and raw reads of a host disk (also through a device node found in the image): refused', async () => {
    const { major, minor } = disk;
    const planted = '/opt/planted-disk';
    const step = [
      `try() { if out=$("$@" 2>/dev/null | wc -c) && [ "$out" -gt 0 ]; then echo "READ $out bytes: $*"; "$@" | grep -a -o ${SECRET_TEXT}; else echo "refused: $*"; fi; }`,
      `mknod /dev/hostdisk b ${major} ${minor} 2>/dev/null && echo "ALLOWED: mknod /dev" || echo "refused: mknod /dev"`,
      `mknod /hostdisk b ${major} ${minor} 2>/dev/null && echo "ALLOWED: mknod /" || echo "refused: mknod /"`,
      'try head -c 8M /dev/hostdisk',
      'try head -c 8M /hostdisk',
      `for d in ${disk.path} /dev/vda /dev/sda /dev/nvme0n1 /dev/xvda /dev/mem /dev/kmem /dev/port; do try head -c 8M $d; done`,
      'try head -c 512 /proc/kcore',
      // A block device node in the image (as an image built by the old builder could hold),
      // put there by the test while this step waits.
      `i=0; while [ ! -e ${planted} ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done; ls -l ${planted}`,
      `try head -c 8M ${planted}`,
      'echo "block devices in /dev: $(find /dev -type b | wc -l); in /sys/block: $(ls /sys/block 2>/dev/null | wc -l)"',
      'exit 7',
    ].join('; ');
    let plantedOnHost = '';
    const output = await buildStep('devices', step, (stderr, child) => {
      if (plantedOnHost || !stderr.includes('run[0]:')) return;
      // The build's tree on the host: .build-<hash>-<the CLI's pid>/rootfs.
      plantedOnHost = 'pending';
      void (async () => {
        const dir = (await readdir(templatesDir(IMAGES_DIR))).find((e) => e.startsWith('.build-') && e.endsWith(`-${child.pid}`));
        assert.ok(dir, 'the build directory');
        plantedOnHost = path.join(templatesDir(IMAGES_DIR), dir, 'rootfs', planted);
        execFileSync('mknod', ['-m', '0600', plantedOnHost, 'b', String(major), String(minor)]);
      })();
    });
    assert.ok(plantedOnHost.endsWith(planted), `the test planted the node: ${plantedOnHost}`);
    assert.match(output, new RegExp(`^\\s+brw------- 1 root root ${major}, +${minor} .* ${planted}$`, 'm'), 'the step saw the planted node');
    assert.doesNotMatch(output, /ALLOWED|READ \d+ bytes/, output);
    assert.ok(!output.includes(SECRET_TEXT), 'no byte of the disk came out');
    assert.equal((output.match(/refused: /g) ?? []).length, 14);
    assert.match(output, /block devices in \/dev: 0; in \/sys\/block: 0/);
  });

  it('writes to /proc/sys and /sys (and a hostname): refused, the host keeps its values', async () => {
    const step = [
      `try() { if sh -c "$1" >/dev/null 2>&1; then echo "ALLOWED: $1"; else echo "refused: $1"; fi; }`,
      'try "echo 7 > /proc/sys/vm/stat_interval"',
      'try "sysctl -q -w vm.stat_interval=7"',
      'try "mount -t sysfs sysfs /sys"',
      `try "echo 4321 > ${KSM_PAGES}"`,
      `try "mount -t sysfs sysfs /mnt && echo 4321 > /mnt/kernel/mm/ksm/pages_to_scan"`,
      // A UTS namespace of its own, and no CAP_SYS_ADMIN even there.
      'try "hostname pwned-by-template"',
      'exit 7',
    ].join('; ');
    const output = await buildStep('sysctl', step);
    assert.doesNotMatch(output, /ALLOWED/, output);
    assert.equal((output.match(/refused: /g) ?? []).length, 6);
    assert.equal((await readFile(STAT_INTERVAL, 'utf8')).trim(), before_.statInterval);
    if (before_.ksmPages) assert.equal((await readFile(KSM_PAGES, 'utf8')).trim(), before_.ksmPages);
    assert.equal(os.hostname(), before_.hostname);
    assert.equal((await stat('/etc/hostname')).isFile(), true);
  });
});

describe("red team: a package download step (the host's network namespace) cannot reach the host itself, nor a private network, nor the sandbox subnet", () => {
  it("loopback, the host's addresses and a private address: dropped for the build uids; a public address in a test namespace: reachable, and dropped once it is in the configured sandbox subnet", async () => {
    // A build container on a copy of minimal's tree, as a package step uses it: network on.
    const minimal = await new TemplateCatalogue(IMAGES_DIR).resolve('minimal');
    const workDir = await mkdtemp('/var/tmp/sbx-build-fence-');
    await chmod(workDir, 0o755); // crossable by the step's root, a host uid (as a build's directory is)
    const lab = await createNetLab(TEST_PREFIX);
    // Listening on every host address: what a service bound to 0.0.0.0 exposes.
    const { port, server } = await listenOn('0.0.0.0');
    let container: BuildContainer | undefined;
    // What a CLI build in this environment fences (SBX_SUBNET), as the entry point hands it in.
    const sandboxSubnets = [networkSettingsFromEnv(process.env).subnet];
    try {
      execFileSync('cp', ['-a', '--reflink=auto', minimal.image.rootfs, path.join(workDir, 'rootfs')]);
      container = await BuildContainer.open(path.join(workDir, 'rootfs'), workDir, { sandboxSubnets });
      const probe = (address: string, target: number) =>
        `python3 -c ${shellQuote(`import socket; s = socket.socket(); s.settimeout(3)\ntry:\n  s.connect((${JSON.stringify(address)}, ${target})); print('open', ${JSON.stringify(address)})\nexcept Exception as e:\n  print('closed', ${JSON.stringify(address)}, type(e).__name__)`)}`;
      const lines: string[] = [];
      // The control: the host reaches its listener on both addresses.
      for (const address of ['127.0.0.1', lab.uplinkHostAddress]) {
        assert.equal(
          (await run(['timeout', '3', 'bash', '-c', 'exec 3<>"/dev/tcp/$0/$1"', address, String(port)], { allowFailure: true })).exitCode,
          0,
          address,
        );
      }
      // The control: the host reaches the lab's private address (routed to the lab's namespace).
      assert.equal(
        (await run(['timeout', '3', 'bash', '-c', 'exec 3<>"/dev/tcp/$0/$1"', lab.privateAddress, String(lab.port)], { allowFailure: true })).exitCode,
        0,
        lab.privateAddress,
      );
      const probes = [probe('127.0.0.1', port), probe(lab.uplinkHostAddress, port), probe(lab.privateAddress, lab.port), probe(lab.publicAddress, lab.port)];
      await container.run(['/bin/sh', '-c', probes.join('; ')], {
        network: true,
        onLine: (line) => lines.push(line),
      });
      const out = lines.join('\n');
      // Dropped (a timeout), not refused: the fence, not a closed port.
      assert.match(out, /^closed 127\.0\.0\.1 TimeoutError$/m, out);
      assert.match(out, new RegExp(`^closed ${lab.uplinkHostAddress.replace(/\./g, '\\.')} TimeoutError$`, 'm'), out);
      // A private network (as a cloud's metadata service, a LAN's database, another sandbox): a base image's apt hook reaches none.
      assert.match(out, new RegExp(`^closed ${lab.privateAddress.replace(/\./g, '\\.')} TimeoutError$`, 'm'), out);
      assert.match(out, new RegExp(`^open ${lab.publicAddress.replace(/\./g, '\\.')}$`, 'm'), `the step has the network: ${out}`);

      // The same public address once an orchestrator's sandbox subnet (SBX_SUBNET) holds it, outside
      // every blocked range: before, the fence left it open, so a build step reached the guests there.
      await container.close();
      const labSubnet = `${lab.publicAddress}/30`; // not canonical on purpose: the fence clears the host bits
      container = await BuildContainer.open(path.join(workDir, 'rootfs'), workDir, { sandboxSubnets: [...sandboxSubnets, labSubnet] });
      const fenced: string[] = [];
      await container.run(['/bin/sh', '-c', probe(lab.publicAddress, lab.port)], { network: true, onLine: (line) => fenced.push(line) });
      assert.match(fenced.join('\n'), new RegExp(`^closed ${lab.publicAddress.replace(/\./g, '\\.')} TimeoutError$`, 'm'), fenced.join('\n'));
    } finally {
      // Never deleted: put back as a build in this environment leaves it.
      const first = buildIdBase();
      await fenceHostFromBuilds({ first, last: first + BUILD_ID_RANGES * ID_RANGE_SIZE - 1 }, sandboxSubnets);
      server.close();
      await container?.close();
      await lab.close();
      await removeTree(workDir);
    }
  });
});

/** One argument for sh -c, single-quoted. */
function shellQuote(text: string): string {
  return `'${text.replace(/'/g, `'\\''`)}'`;
}
