import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { readFile, readdir, readlink, stat, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { after, before, describe, it } from 'node:test';
import Database from 'better-sqlite3';
import { containerSettingsFromEnv, ID_RANGE_SIZE } from '../src/runtimes/container/settings.js';
import { ResourceNames } from '../src/network/names.js';
import { ContainerRuntime } from '../src/runtimes/container/container-runtime.js';
import { guestUidsOf } from '../src/runtimes/container/guest-uids.js';
import { readMounts } from '../src/runtimes/container/remount.js';
import { CONFIG_FILES } from '../src/guest/contract.js';
import { generateClientKey, publicKeyBlob } from '../src/transport/ssh-keys.js';
import { guestTransport, type GuestTransport } from '../src/transport/index.js';
import { run } from '../src/util/exec.js';
import { connectToGuest, guestAddress, guestSh } from './helpers/guest.js';
import { startTestOrchestrator, TEST_PREFIX, type TestOrchestrator } from './helpers/orchestrator.js';

/**
 * Red team: what a guest (its desktop user, or its root) can do to the host and to another
 * tenant's sandbox through the kernel they share. Every attack is performed for real.
 */

/** A low I/O limit, so that a guest's direct writes are measurably held to it. */
const IO_LIMIT_BPS = 8 * 1024 * 1024;
/**
 * A quarter of a CPU: a burner reaches it even on a host busy with other work (a quota a
 * contended burner never reaches is never seen to throttle).
 */
const CPUS = 0.25;
const SETTINGS = { ...containerSettingsFromEnv(process.env), ioBytesPerSecond: IO_LIMIT_BPS, cpus: CPUS };

let orch: TestOrchestrator;
let runtime: ContainerRuntime;
const sessions: string[] = [];
const guests = new Map<string, GuestTransport>();

async function createSession(): Promise<{ id: string; ms: number }> {
  const started = performance.now();
  const res = await orch.server.inject({ method: 'POST', url: '/v1/sessions', payload: { width: 640, height: 480 } });
  const ms = performance.now() - started;
  assert.equal(res.statusCode, 201, res.body);
  const id = String(res.json().id);
  sessions.push(id);
  guests.set(id, await connectToGuest(orch.stateDir, id, await guestAddress(orch.names, id)));
  return { id, ms };
}

function guest(id: string): GuestTransport {
  const conn = guests.get(id);
  assert.ok(conn, `a connection to ${id}`);
  return conn;
}

const rootGuests = new Map<string, GuestTransport>();

/**
 * Runs a command as the guest's root, through the guest's own sshd (so under the container's
 * seccomp profile and capabilities): the test adds a root key whose forced command runs what
 * it is sent, as sshd_config allows (PermitRootLogin forced-commands-only).
 */
async function asGuestRoot(id: string, script: string, allowFailure = false): Promise<{ text: string; stderr: string; code: number | null }> {
  let conn = rootGuests.get(id);
  if (!conn) {
    const key = generateClientKey(`root-${id}`);
    const configDir = path.join(orch.stateDir, id, 'config');
    await writeFile(path.join(configDir, 'root_authorized_keys'), `command="eval \\"$SSH_ORIGINAL_COMMAND\\"" ${key.public}\n`, { mode: 0o644 });
    const hostPub = await readFile(path.join(configDir, CONFIG_FILES.hostKeyPub), 'utf8');
    conn = guestTransport({
      endpoint: { host: await guestAddress(orch.names, id), port: 22 },
      username: 'root',
      privateKey: key.private,
      pinnedHostKey: publicKeyBlob(hostPub.trim()),
    });
    await conn.open(10_000);
    rootGuests.set(id, conn);
  }
  const res = await guestSh(conn, script);
  if (!allowFailure) assert.equal(res.exitCode, 0, `as guest root: ${script}: ${res.stderr.toString()}`);
  return { text: res.text, stderr: res.stderr.toString('utf8'), code: res.exitCode };
}

async function initPid(id: string): Promise<number> {
  const res = await run(['runc', '--root', orch.names.runcRoot, 'state', orch.names.container(id)]);
  return (JSON.parse(res.stdout) as { pid: number }).pid;
}

/** Prints the inode of the user namespace that owns the network namespace at argv[1] (ioctl NS_GET_USERNS). */
const NETNS_OWNER = 'import fcntl, os, sys; print(os.fstat(fcntl.ioctl(os.open(sys.argv[1], os.O_RDONLY), 0xb701)).st_ino)';

/** The first host id of a session's range, as the store's ledger recorded it. */
function leasedRange(id: string): number {
  const db = new Database(path.join(orch.stateDir, 'orchestrator.db'), { readonly: true, fileMustExist: true });
  try {
    const row = db.prepare("SELECT name FROM session_resources WHERE session_id = ? AND kind = 'id-range'").get(id) as { name: string } | undefined;
    assert.ok(row, `${id} has an id range on the ledger`);
    const [first, size] = row.name.split(':').map(Number);
    assert.equal(size, ID_RANGE_SIZE);
    return first as number;
  } finally {
    db.close();
  }
}

/** A cgroup file of a session: cgroup v2's name, or v1's under its controller. */
async function cgroupFile(id: string, v1: [controller: string, file: string], v2: string): Promise<string> {
  const rel = orch.names.cgroup(id);
  const unified = path.join('/sys/fs/cgroup', rel, v2);
  if (existsSync('/sys/fs/cgroup/cgroup.controllers')) return (await readFile(unified, 'utf8')).trim();
  return (await readFile(path.join('/sys/fs/cgroup', v1[0], rel, v1[1]), 'utf8')).trim();
}

/** Host uids of every process in the session's user namespace, as the host sees them. */
async function hostUidsOf(id: string): Promise<number[]> {
  const userns = await readLink(`/proc/${await initPid(id)}/ns/user`);
  const uids: number[] = [];
  for (const entry of await readdir('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    if ((await readLink(`/proc/${entry}/ns/user`)) !== userns) continue;
    const status = await readFile(`/proc/${entry}/status`, 'utf8').catch(() => '');
    const uid = /^Uid:\s+(\d+)/m.exec(status)?.[1];
    if (uid) uids.push(Number(uid));
  }
  return uids;
}

/** A namespace link, or '' for a process gone meanwhile. */
function readLink(p: string): Promise<string> {
  return readlink(p).catch(() => '');
}

function percentile(values: number[], p: number): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))] as number;
}

/** The test process's resident memory (the orchestrator runs in it), MiB. */
async function rssMiB(): Promise<number> {
  const status = await readFile('/proc/self/status', 'utf8');
  return Number(/^VmRSS:\s+(\d+)/m.exec(status)?.[1] ?? 0) / 1024;
}

describe('red team: a container sandbox against the host and its neighbours', () => {
  let a: string;
  let b: string;
  let rssAtStart = 0;

  before(async () => {
    const names = new ResourceNames(TEST_PREFIX);
    // Screenshots back to back measure the neighbour: far faster than a tenant's default request rate.
    runtime = new ContainerRuntime(names, SETTINGS);
    orch = await startTestOrchestrator({ tenantRequestsPerSecond: 10_000, tenantRequestBurst: 10_000 }, false, { runtime, reason: 'red-team test' });
    const first = await createSession();
    const second = await createSession();
    a = first.id;
    b = second.id;
    console.log(`create-to-ready: ${Math.round(first.ms)} ms, ${Math.round(second.ms)} ms`);
    rssAtStart = await rssMiB();
  });
  after(async () => {
    // The attacks run in the guests: the orchestrator's memory is not theirs to grow.
    console.log(`orchestrator (test process) RSS: ${rssAtStart.toFixed(0)} MiB before the attacks, ${(await rssMiB()).toFixed(0)} MiB after`);
    for (const conn of [...guests.values(), ...rootGuests.values()]) conn.close();
    await orch?.stop();
  });

  it('guest root is not host root: its files and processes are host ids of its own range', async () => {
    const first = leasedRange(a);
    const base = runtime.uidBase;
    assert.ok(first >= base && (first - base) % ID_RANGE_SIZE === 0, `the range is one of the ranges from the base ${base} (${first})`);
    // Inside: guest root is uid 0, mapped from the leased range.
    assert.equal((await asGuestRoot(a, 'id -u')).text.trim(), '0');
    const uidMap = (await guestSh(guest(a), 'cat /proc/self/uid_map')).text.trim().split(/\s+/).map(Number);
    assert.deepEqual(uidMap, [0, first, ID_RANGE_SIZE]);
    assert.deepEqual((await guestSh(guest(a), 'cat /proc/self/gid_map')).text.trim().split(/\s+/).map(Number), [0, first, ID_RANGE_SIZE]);

    // A file the guest's root makes, and one its desktop user makes, on the sandbox's disk.
    await asGuestRoot(a, 'echo root > /etc/made-by-guest-root');
    await guestSh(guest(a), 'echo user > ~/made-by-guest-user');
    const upper = path.join(orch.stateDir, a, 'overlay', 'upper');
    const rootFile = await stat(path.join(upper, 'etc', 'made-by-guest-root'));
    const userFile = await stat(path.join(upper, 'home', 'user', 'made-by-guest-user'));
    assert.deepEqual([rootFile.uid, rootFile.gid], [first, first], 'owned on the host by the mapped root, not by host root');
    assert.deepEqual([userFile.uid, userFile.gid], [first + 1000, first + 1000], 'owned by a host uid no real user has');

    // The host's view of the sandbox's processes: all in the range, root and the desktop user among them.
    const uids = await hostUidsOf(a);
    assert.ok(uids.length >= 3, `the sandbox runs processes (${uids.length})`);
    for (const uid of uids) assert.ok(uid >= first && uid < first + ID_RANGE_SIZE, `process uid ${uid} is in [${first}, ${first + ID_RANGE_SIZE})`);
    assert.ok(uids.includes(first), 'its init runs as the mapped root');
    assert.ok(uids.includes(first + 1000), 'its desktop runs as the mapped desktop user');
    assert.ok(!uids.includes(0), 'nothing in it runs as host root');

    // Guest root holds no power over what the host owns. Its session config is a read-only
    // bind: the write fails for exactly that reason, and the host's file is unchanged.
    const keysFile = path.join(orch.stateDir, a, 'config', CONFIG_FILES.authorizedKeys);
    const keysBefore = await readFile(keysFile);
    const res = await asGuestRoot(a, 'echo x > /sandbox/config/authorized_keys', true);
    assert.notEqual(res.code, 0, 'guest root cannot write the session config');
    assert.match(res.stderr, /Read-only file system/, `refused as a read-only mount, not for another reason: ${res.stderr}`);
    assert.deepEqual(await readFile(keysFile), keysBefore, "the host's file is unchanged");
    // Not root: a host-root file that reaches into the sandbox (runc binds the host's
    // /dev/null into a user-namespaced container) belongs to an id its namespace does not
    // map ("nobody"), and guest root cannot act as its owner (setting its times: EPERM),
    // though it can on a file of its own: the refusal is the user namespace's, not a typo's.
    assert.equal((await asGuestRoot(a, 'touch /tmp/own && touch -d @0 /tmp/own && stat -c %Y /tmp/own')).text.trim(), '0', 'guest root owns its own files');
    const hostMtime = (await stat('/dev/null')).mtimeMs;
    const devNull = await asGuestRoot(a, 'stat -c %u:%g /dev/null; touch -d @0 /dev/null', true);
    assert.equal(devNull.text.trim(), '65534:65534', "the host's root is nobody in the sandbox");
    assert.notEqual(devNull.code, 0);
    assert.match(devNull.stderr, /Operation not permitted/, `refused by the kernel as not its owner: ${devNull.stderr}`);
    assert.equal((await stat('/dev/null')).mtimeMs, hostMtime, "the host's /dev/null is untouched");
  });

  it('two sessions have disjoint id ranges', async () => {
    const [ra, rb] = [leasedRange(a), leasedRange(b)];
    assert.ok(Math.abs(ra - rb) >= ID_RANGE_SIZE, `${ra} and ${rb} do not overlap`);
    const uidsB = await hostUidsOf(b);
    for (const uid of uidsB) assert.ok(uid >= rb && uid < rb + ID_RANGE_SIZE, `b's process uid ${uid} is in its own range`);
  });

  it("its network namespace is its own user namespace's, and guest root still cannot change the network (no CAP_NET_ADMIN)", async () => {
    // runc made it inside the sandbox's user namespace (what CRIU needs, docs/pause.md), and
    // the host moved the session's eth0 into it: the netns name is that namespace.
    const pid = await initPid(a);
    const named = `/var/run/netns/${orch.names.netns(a)}`;
    assert.equal(await readLink(`/proc/${pid}/ns/net`), `net:[${(await stat(named)).ino}]`, "the named netns is the container init's");
    const owner = await run(['python3', '-I', '-c', NETNS_OWNER, named]);
    assert.equal(`user:[${owner.stdout.trim()}]`, await readLink(`/proc/${pid}/ns/user`), "owned by the sandbox's user namespace");
    // Owning it gives guest root nothing: the capability is not in its bounding set.
    const address = await guestAddress(orch.names, a);
    for (const command of ['ip addr add 10.99.0.9/32 dev eth0', 'ip route add 10.99.0.0/24 dev eth0', 'ip link add x0 type dummy', 'ip link set eth0 down']) {
      const res = await asGuestRoot(a, command, true);
      assert.notEqual(res.code, 0, `as guest root: ${command}`);
      assert.match(res.stderr, /Operation not permitted/, `${command}: refused for want of the capability: ${res.stderr}`);
    }
    const ips = (await guestSh(guest(a), 'ip -o -4 addr show scope global')).text.trim().split('\n');
    assert.equal(ips.length, 1, `one address: ${ips.join('; ')}`);
    assert.match(ips[0] ?? '', new RegExp(`eth0\\s+inet ${address.replace(/\./g, '\\.')}/`));
  });

  it('seccomp: io_uring_setup fails in the guest, kernel-facing calls are refused, ordinary ones work', async () => {
    const script = [
      'import ctypes, os',
      'libc = ctypes.CDLL(None, use_errno=True)',
      'def call(nr, *args):',
      '    r = libc.syscall(nr, *args)',
      '    return (r, ctypes.get_errno() if r < 0 else 0)',
      'params = ctypes.create_string_buffer(120)',
      'print("io_uring_setup", *call(425, 8, params))',
      'print("getpid", *call(39))',
      'print("unshare_user", *call(272, 0x10000000))',
      'print("add_key", *call(248, b"user", b"x", b"y", 1, -4))',
      'print("mount", *call(165, b"none", b"/tmp", b"tmpfs", 0, None))',
    ].join('\n');
    for (const runAs of ['user', 'root'] as const) {
      const out = runAs === 'user' ? (await guestSh(guest(a), `python3 -I -c '${script}'`)).text : (await asGuestRoot(a, `python3 -I -c '${script}'`)).text;
      const results = new Map(
        out
          .trim()
          .split('\n')
          .map((line) => {
            const [name, r, errno] = line.split(' ');
            return [name, { r: Number(r), errno: Number(errno) }] as const;
          }),
      );
      assert.deepEqual(results.get('io_uring_setup'), { r: -1, errno: 38 }, `${runAs}: io_uring_setup fails with ENOSYS`);
      assert.ok((results.get('getpid')?.r ?? 0) > 0, `${runAs}: getpid works`);
      assert.deepEqual(results.get('unshare_user'), { r: -1, errno: 1 }, `${runAs}: no new user namespace (EPERM)`);
      assert.deepEqual(results.get('add_key'), { r: -1, errno: 1 }, `${runAs}: keyring calls are not on the allow-list (EPERM)`);
      assert.deepEqual(results.get('mount'), { r: -1, errno: 1 }, `${runAs}: mount is not on the allow-list (EPERM)`);
    }
    assert.match((await guestSh(guest(a), 'grep ^Seccomp: /proc/self/status')).text, /Seccomp:\s+2/);
  });

  it('a CPU burner is held to its quota while another session keeps answering screenshots', async () => {
    const quota = Number(await cgroupFile(a, ['cpu', 'cpu.cfs_quota_us'], 'cpu.max').then((v) => v.split(' ')[0]));
    assert.equal(quota, Math.round(SETTINGS.cpus * 100_000));
    const shot = async () => {
      const started = performance.now();
      const res = await orch.server.inject({ method: 'GET', url: `/v1/sessions/${b}/screenshot` });
      assert.equal(res.statusCode, 200);
      return performance.now() - started;
    };
    const quiet: number[] = [];
    for (let i = 0; i < 5; i++) quiet.push(await shot());

    const usage = () =>
      cgroupFile(a, ['cpuacct', 'cpuacct.usage'], 'cpu.stat').then((v) =>
        /usage_usec (\d+)/.exec(v) ? Number(/usage_usec (\d+)/.exec(v)?.[1]) * 1000 : Number(v),
      );
    const throttled = () => cgroupFile(a, ['cpu', 'cpu.stat'], 'cpu.stat').then((v) => Number(/nr_throttled (\d+)/.exec(v)?.[1] ?? 0));
    // Two busy loops per host CPU: far more than its one CPU's worth.
    await guestSh(guest(a), 'for i in $(seq $((2 * $(nproc)))); do nohup sh -c "while :; do :; done" >/dev/null 2>&1 & echo $! >> /tmp/burners; done');
    try {
      await sleep(1_000);
      // The clock read right beside the usage: another read between them counted as CPU time unused.
      const [u0, w0, t0] = [await usage(), performance.now(), await throttled()];
      const busy: number[] = [];
      while (performance.now() - w0 < 4_000) busy.push(await shot());
      const [u1, w1, t1] = [await usage(), performance.now(), await throttled()];
      const cpus = (u1 - u0) / 1e6 / (w1 - w0);
      console.log(
        `burner: ${cpus.toFixed(2)} CPUs used (quota ${SETTINGS.cpus}), throttled ${t1 - t0} times; ` +
          `neighbour's screenshot p50/max: quiet ${Math.round(percentile(quiet, 50))}/${Math.round(Math.max(...quiet))} ms, ` +
          `during the burn ${Math.round(percentile(busy, 50))}/${Math.round(Math.max(...busy))} ms (${busy.length} shots)`,
      );
      assert.ok(t1 - t0 > 0, 'the burner was throttled (cpu.stat nr_throttled grew)');
      assert.ok(cpus <= SETTINGS.cpus * 1.1, `the burner used ${cpus.toFixed(2)} CPUs, within its quota of ${SETTINGS.cpus}`);
      assert.ok(busy.length >= 3, 'the neighbour kept answering screenshots');
    } finally {
      await guestSh(guest(a), 'kill -KILL $(cat /tmp/burners); rm /tmp/burners');
    }
  });

  it('no swap, and direct writes to the sandbox disk are held to the I/O limit', async () => {
    // v2: no swap at all; v1: memory plus swap may not exceed memory (the same, said otherwise).
    const swap = await cgroupFile(a, ['memory', 'memory.memsw.limit_in_bytes'], 'memory.swap.max');
    const expected = existsSync('/sys/fs/cgroup/cgroup.controllers') ? '0' : await cgroupFile(a, ['memory', 'memory.limit_in_bytes'], 'memory.max');
    assert.equal(swap, expected, 'no swap');
    const limits = await cgroupFile(a, ['blkio', 'blkio.throttle.write_bps_device'], 'io.max');
    assert.match(limits, new RegExp(`^7:\\d+ .*${IO_LIMIT_BPS}`, 'm'), `a write limit on the sandbox's loop device (${limits})`);
    // 24 MiB written with O_DIRECT (buffered writeback is not charged to the writer on cgroup v1).
    const started = performance.now();
    await guestSh(guest(a), 'dd if=/dev/zero of=$HOME/io-test bs=1M count=24 oflag=direct 2>&1; rm -f $HOME/io-test');
    const seconds = (performance.now() - started) / 1000;
    console.log(`24 MiB of direct writes took ${seconds.toFixed(1)} s at a limit of ${IO_LIMIT_BPS / 1024 / 1024} MiB/s`);
    assert.ok(seconds >= (24 * 1024 * 1024) / IO_LIMIT_BPS - 1, `the writes were held to the limit (${seconds.toFixed(1)} s)`);
  });

  it("guest root takes no uid its image does not name: its inotify, counted per uid, cannot reach host root's, which every sandbox shares", async () => {
    // Guest root tries 40 uids of its range that its image does not name, and those it does,
    // each taking every inotify instance it can. Before, it took 128 for each of them, and at
    // 40 uids host root (every other sandbox's count, and the host's own services) had none left.
    const image = (await readMounts(path.join(orch.stateDir, a, 'bundle')))?.imageRootfs;
    assert.ok(image, "the session's image");
    const uids = [...(await guestUidsOf(image)), ...Array.from({ length: 40 }, (_, i) => 3000 + i)];
    const grab = [
      'import ctypes, os, time',
      'libc = ctypes.CDLL(None, use_errno=True)',
      'refused, held = 0, 0',
      `for uid in ${JSON.stringify(uids)}:`,
      '    r, w = os.pipe()',
      '    if os.fork() == 0:',
      '        try: os.setresuid(-1, uid, -1)',
      "        except OSError: os.write(w, b'-1'); os._exit(0)",
      '        n = 0',
      '        while libc.inotify_init() >= 0: n += 1',
      '        os.write(w, str(n).encode()); time.sleep(120); os._exit(0)',
      '    got = int(os.read(r, 32))',
      '    if got < 0: refused += 1',
      '    else: held += got',
      'print(refused, held, flush=True)',
      'time.sleep(120)',
    ].join('\n');
    const started = performance.now();
    await asGuestRoot(a, `cat > /tmp/grab.py <<'EOF'\n${grab}\nEOF\nnohup python3 -I /tmp/grab.py > /tmp/grab.out 2>&1 < /dev/null & echo $! > /tmp/grab.pid`);
    try {
      let report = '';
      for (const deadline = Date.now() + 60_000; Date.now() < deadline && !report.includes(' '); await sleep(200)) {
        report = (await asGuestRoot(a, 'cat /tmp/grab.out')).text.trim();
      }
      const [refused, held] = report.split(' ').map(Number);
      const named = uids.length - 40;
      console.log(
        `guest root: ${refused} of ${uids.length} uids refused; ${held} inotify instances held over the ${named} its image names (${Math.round(performance.now() - started)} ms)`,
      );
      assert.equal(refused, 40, 'every uid its image does not name is refused');
      assert.ok(held !== undefined && held <= named * SETTINGS.inotifyInstances, `at most its limit per uid its image names (${held})`);
      // While it holds them, the host's own root still makes instances, and so does tenant B's user.
      const host = await run(['python3', '-c', 'import ctypes; print(ctypes.CDLL(None).inotify_init() >= 0)']);
      assert.equal(host.stdout.trim(), 'True', "host root's inotify is untouched");
      const probe = 'import ctypes; print(ctypes.CDLL(None).inotify_init() >= 0)';
      assert.equal((await guestSh(guest(b), `python3 -I -c '${probe}'`)).text.trim(), 'True', "tenant B's app can still make one");
    } finally {
      await asGuestRoot(a, 'pkill -KILL -P $(cat /tmp/grab.pid); kill -KILL $(cat /tmp/grab.pid); rm -f /tmp/grab.*', true);
    }
  });

  it("an inotify exhaustion in one tenant's sandbox does not reach another's", async () => {
    // Tenant A's desktop user takes every inotify watch and instance it can, and holds them.
    // It stops trying at twice its watch limit and four times its instance limit: enough to
    // show a missing limit, without taking the whole host's when one is missing.
    const maxWatchInstances = Math.ceil((2 * SETTINGS.inotifyWatches) / 2500);
    const exhaust = [
      'import ctypes, os, json, time',
      'libc = ctypes.CDLL(None, use_errno=True)',
      'os.makedirs("/tmp/w", exist_ok=True)',
      'files = []',
      'for i in range(2500):',
      '    p = "/tmp/w/%d" % i',
      '    open(p, "w").close()',
      '    files.append(p.encode())',
      'fds, watches, watch_err = [], 0, 0',
      `while not watch_err and len(fds) < ${maxWatchInstances}:`,
      '    fd = libc.inotify_init1(0)',
      '    if fd < 0: break',
      '    fds.append(fd)',
      '    for p in files:',
      '        if libc.inotify_add_watch(fd, p, 2) < 0:',
      '            watch_err = ctypes.get_errno(); break',
      '        watches += 1',
      'inst_err = 0',
      `while len(fds) < ${4 * SETTINGS.inotifyInstances}:`,
      '    fd = libc.inotify_init1(0)',
      '    if fd < 0:',
      '        inst_err = ctypes.get_errno(); break',
      '    fds.append(fd)',
      'print(json.dumps({"watches": watches, "watch_err": watch_err, "instances": len(fds), "inst_err": inst_err}), flush=True)',
      'time.sleep(120)',
    ].join('\n');
    const probe = [
      'import ctypes',
      'libc = ctypes.CDLL(None, use_errno=True)',
      'fd = libc.inotify_init1(0)',
      'err = ctypes.get_errno() if fd < 0 else 0',
      'w = libc.inotify_add_watch(fd, b"/tmp", 2) if fd >= 0 else -1',
      'print(fd >= 0, err, w >= 0)',
    ].join('\n');
    await guestSh(
      guest(a),
      `cat > /tmp/exhaust.py <<'EOF'\n${exhaust}\nEOF\nnohup python3 -I /tmp/exhaust.py > /tmp/exhaust.out 2>&1 & echo $! > /tmp/exhaust.pid`,
    );
    try {
      let report = '';
      const deadline = Date.now() + 60_000;
      while (Date.now() < deadline && !report.includes('{')) {
        await sleep(200);
        report = (await guestSh(guest(a), 'cat /tmp/exhaust.out')).text;
      }
      const held = JSON.parse(report.trim()) as { watches: number; watch_err: number; instances: number; inst_err: number };
      console.log(
        `tenant A's user holds ${held.instances} inotify instances (then errno ${held.inst_err}) and ${held.watches} watches (then errno ${held.watch_err})`,
      );
      assert.equal(held.watch_err, 28, 'A ran out of watches (ENOSPC)');
      assert.ok(held.watches <= SETTINGS.inotifyWatches, `A was stopped at its own watch limit (${held.watches} <= ${SETTINGS.inotifyWatches})`);
      assert.equal(held.inst_err, 24, 'A ran out of instances (EMFILE)');
      assert.ok(held.instances <= SETTINGS.inotifyInstances, `A was stopped at its own instance limit (${held.instances} <= ${SETTINGS.inotifyInstances})`);
      // A itself can make no more: its limit holds for every process of its user.
      assert.equal((await guestSh(guest(a), `python3 -I -c '${probe}'`)).text.trim(), 'False 24 False');
      // B's desktop user still can, meanwhile.
      assert.equal((await guestSh(guest(b), `python3 -I -c '${probe}'`)).text.trim(), 'True 0 True', "tenant B's app can still watch files");
    } finally {
      await guestSh(guest(a), 'kill -KILL $(cat /tmp/exhaust.pid); rm -rf /tmp/w /tmp/exhaust.*');
    }
  });
});
