import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { chown, mkdir, mkdtemp, readFile, rm, stat, utimes, writeFile } from 'node:fs/promises';
import { setTimeout as sleep } from 'node:timers/promises';
import os from 'node:os';
import path from 'node:path';
import { gunzipSync, gzipSync } from 'node:zlib';
import { after, describe, it } from 'node:test';
import { containerSettingsFromEnv } from '../src/runtimes/container/settings.js';
import { firecrackerSettingsFromEnv } from '../src/runtimes/firecracker/settings.js';
import { qemuSettingsFromEnv } from '../src/runtimes/qemu/settings.js';
import { buildConfigDrive, configDriveArgv } from '../src/guest/config-drive.js';
import { cpioArchive, type CpioEntry } from '../src/guest/image/cpio.js';
import { mkfsExt4Argv, rootImageSize } from '../src/guest/image/ext4-image.js';
import { INITRD_APPLETS, initScript } from '../src/guest/image/initrd-init.js';
import { initrdEntries } from '../src/guest/image/initrd.js';
import { loadOrder, moduleDepends, moduleName } from '../src/guest/image/kernel-modules.js';
import { truncateTimestamps } from '../src/guest/image/timestamps.js';
import { resolveKernelPackage } from '../src/guest/image/vm-packages.js';
import { guestKernelCmdline } from '../src/guest/kernel-cmdline.js';
import { ResourceNames } from '../src/network/names.js';
import { tapBridgeCommands } from '../src/network/netns.js';
import { probeKvm, tscKhzFromCpuinfo, tscKhzFromKernelLog } from '../src/runtimes/qemu/accelerator.js';
import { macAddressFor, optionValue, qemuArgv, type QemuVmConfig } from '../src/runtimes/qemu/qemu-command.js';
import { sessionIdOfQemu } from '../src/runtimes/qemu/qemu-process.js';
import { bareBootArgv } from '../src/bench/qemu-floor.js';
import { describeExit, type QemuRuntime } from '../src/runtimes/qemu/qemu-runtime.js';
import { RUNTIMES } from '../src/runtimes/registered.js';
import { VmCgroup } from '../src/runtimes/vm/vm-cgroup.js';
import { processUid, VmUserPool, vmUserRange } from '../src/runtimes/vm/vm-user-pool.js';
import { CleanupStack } from '../src/util/cleanup-stack.js';
import { run } from '../src/util/exec.js';
import { kvmRunsGuests } from './helpers/kvm-probe.js';

const scratch = await mkdtemp(path.join(os.tmpdir(), 'sbx-qemu-unit-'));
after(() => rm(scratch, { recursive: true, force: true }));

/** Reads a newc archive back: the kernel's view of what the initrd holds. */
function parseCpio(archive: Buffer): Array<{ name: string; mode: number; data: Buffer; rdev: [number, number] }> {
  const entries = [];
  let at = 0;
  const align = (n: number) => (n + 3) & ~3;
  for (;;) {
    assert.equal(archive.toString('ascii', at, at + 6), '070701', `magic at ${at}`);
    const field = (i: number) => parseInt(archive.toString('ascii', at + 6 + i * 8, at + 14 + i * 8), 16);
    const [mode, size, rdevMajor, rdevMinor, nameSize] = [field(1), field(6), field(9), field(10), field(11)];
    const name = archive.toString('utf8', at + 110, at + 110 + nameSize - 1);
    assert.equal(archive[at + 110 + nameSize - 1], 0, 'name is NUL-terminated');
    const dataAt = align(at + 110 + nameSize);
    if (name === 'TRAILER!!!') break;
    entries.push({ name, mode, data: archive.subarray(dataAt, dataAt + size), rdev: [rdevMajor, rdevMinor] as [number, number] });
    at = align(dataAt + size);
  }
  return entries;
}

describe('initrd: cpio archive, modules, /init', () => {
  it('writes a newc archive the kernel can read: headers, names, data, 4-byte alignment, trailer', () => {
    const entries: CpioEntry[] = [
      { type: 'dir', path: 'bin', mode: 0o755 },
      { type: 'file', path: 'bin/x', mode: 0o755, data: Buffer.from('abcde') },
      { type: 'symlink', path: 'bin/sh', target: 'x' },
      { type: 'chardev', path: 'console', mode: 0o600, major: 5, minor: 1 },
    ];
    const parsed = parseCpio(cpioArchive(entries));
    assert.deepEqual(
      parsed.map((e) => [e.name, e.mode.toString(8), e.data.toString()]),
      [
        ['bin', '40755', ''],
        ['bin/x', '100755', 'abcde'],
        ['bin/sh', '120777', 'x'],
        ['console', '20600', ''],
      ],
    );
    assert.deepEqual(parsed[3]?.rdev, [5, 1]);
    assert.deepEqual(cpioArchive(entries), cpioArchive(entries), 'reproducible');
    assert.throws(() => cpioArchive([{ type: 'dir', path: '../etc', mode: 0o755 }]), /bad path/);
  });

  it('loads modules after their dependencies, each once, and refuses cycles', () => {
    const deps: Record<string, string[]> = {
      virtio_mmio: ['virtio', 'virtio_ring'],
      virtio_blk: ['virtio', 'virtio_ring'],
      virtio_net: ['virtio_ring', 'virtio', 'net_failover'],
      net_failover: ['failover'],
      virtio: ['virtio_ring'],
    };
    const order = loadOrder(['virtio_mmio', 'virtio_blk', 'virtio-net'], (name) => deps[name] ?? []);
    assert.deepEqual(order, ['virtio_ring', 'virtio', 'virtio_mmio', 'virtio_blk', 'failover', 'net_failover', 'virtio_net']);
    assert.throws(() => loadOrder(['a'], (name) => (name === 'a' ? ['b'] : ['a'])), /cycle: a -> b -> a/);
    assert.equal(moduleName('virtio-rng.ko'), 'virtio_rng');
  });

  it("reads a module's dependencies from its .modinfo ELF section", () => {
    const elf = fakeModule(['license=GPL', 'depends=virtio,virtio_ring', 'name=virtio_mmio']);
    assert.deepEqual(moduleDepends(elf), ['virtio', 'virtio_ring']);
    assert.deepEqual(moduleDepends(fakeModule(['depends='])), []);
  });

  it('generates an /init that loads the modules in order, mounts the root and switch_roots', async () => {
    const script = initScript({
      modules: ['virtio_ring', 'virtio', 'virtio_blk'],
      defaultRoot: '/dev/vda',
      defaultInit: '/sbin/sandbox-init',
      rootWaitSeconds: 10,
    });
    assert.match(script, /^#!\/bin\/sh\n/);
    assert.match(script, /for module in virtio_ring virtio virtio_blk; do/);
    assert.match(script, /root=\/dev\/vda\ninit=\/sbin\/sandbox-init/);
    assert.match(script, /mount -t ext4 -o "\$mode" "\$root" \/newroot/);
    assert.match(script, /exec switch_root \/newroot "\$init"/);
    assert.match(script, /echo b >\/proc\/sysrq-trigger/, 'a failed boot ends the VM');
    // Every command it runs is an applet the initrd links (or a shell builtin).
    for (const applet of ['insmod', 'mount', 'switch_root', 'sleep', 'mkdir', 'cat', 'sync']) assert.ok((INITRD_APPLETS as readonly string[]).includes(applet));
    const file = path.join(scratch, 'init');
    await writeFile(file, script);
    assert.equal((await run(['sh', '-n', file], { allowFailure: true })).exitCode, 0, 'valid sh');
    assert.throws(() => initScript({ modules: ['x; reboot'], defaultRoot: '/dev/vda', defaultInit: '/sbin/init', rootWaitSeconds: 1 }), /bad kernel module/);
  });

  it('puts busybox, its applets, the modules and /init into the archive, and it gunzips', () => {
    const entries = initrdEntries(Buffer.from('BUSYBOX'), [{ name: 'virtio', data: Buffer.from('KO') }], '#!/bin/sh\n');
    const parsed = parseCpio(gunzipSync(gzipSync(cpioArchive(entries))));
    const byName = new Map(parsed.map((e) => [e.name, e]));
    assert.equal(byName.get('init')?.mode, 0o100755);
    assert.equal(byName.get('bin/busybox')?.data.toString(), 'BUSYBOX');
    assert.equal(byName.get('bin/insmod')?.data.toString(), 'busybox');
    assert.equal(byName.get('lib/modules/virtio.ko')?.data.toString(), 'KO');
    assert.deepEqual(byName.get('dev/console')?.rdev, [5, 1]);
    assert.ok(parsed.findIndex((e) => e.name === 'lib') < parsed.findIndex((e) => e.name === 'lib/modules'));
  });
});

describe('kernel command line and QEMU command line', () => {
  it('has what Firecracker and our initrd need', () => {
    const cmdline = guestKernelCmdline({ extra: ['tsc_early_khz=2445428'] }).split(' ');
    for (const arg of ['console=ttyS0', 'reboot=k', 'panic=1', 'pci=off', 'root=/dev/vda', 'rw', 'init=/sbin/sandbox-init', 'quiet', 'tsc_early_khz=2445428']) {
      assert.ok(cmdline.includes(arg), arg);
    }
    assert.ok(!guestKernelCmdline({ quiet: false }).includes('quiet'));
    assert.throws(() => guestKernelCmdline({ extra: ['a b'] }), /unsafe/);
    assert.throws(() => guestKernelCmdline({ extra: ['$(reboot)'] }), /unsafe/);
  });

  const vm: QemuVmConfig = {
    name: 'sbx-abcdefghij',
    accelerator: 'tcg',
    smp: 2,
    memoryMiB: 1024,
    kernel: '/img/vmlinuz',
    initrd: '/img/initrd.img',
    cmdline: 'console=ttyS0',
    rootDisk: '/state/a,b/root.qcow2',
    configDrive: '/state/x/config.ext4',
    tap: 'tap0',
    mac: '02:00:00:00:00:01',
    pidFile: '/state/x/qemu.pid',
    runAs: 'nobody',
  };
  const after = (argv: string[], flag: string) => argv.filter((_, i) => argv[i - 1] === flag);

  it('builds a microvm command line: machine, accelerator, disks in order, TAP, serial, pidfile', () => {
    const argv = qemuArgv(vm);
    assert.deepEqual(after(argv, '-machine'), ['microvm,pit=on,pic=on,rtc=on']);
    assert.deepEqual(after(argv, '-accel'), ['tcg,tb-size=256'], 'the TCG code cache fits the cgroup');
    assert.deepEqual(after(argv, '-cpu'), ['max']);
    assert.deepEqual(after(argv, '-name'), ['guest=sbx-abcdefghij,process=sbx-abcdefghij']);
    assert.deepEqual(after(argv, '-m'), ['1024M']);
    assert.deepEqual(after(argv, '-smp'), ['2']);
    assert.ok(argv.includes('-no-reboot') && argv.includes('-nodefaults'));
    assert.deepEqual(after(argv, '-append'), ['console=ttyS0']);
    const drives = after(argv, '-drive');
    assert.match(drives[0] as string, /^id=root,.*format=qcow2,file=\/state\/a,,b\/root\.qcow2,cache=unsafe/, 'root first (vda), comma doubled');
    assert.match(drives[1] as string, /^id=config,.*format=raw,file=\/state\/x\/config\.ext4,read-only=on$/, 'config drive second (vdb)');
    assert.deepEqual(after(argv, '-netdev'), ['tap,id=net0,ifname=tap0,script=no,downscript=no']);
    assert.deepEqual(after(argv, '-device'), [
      'virtio-blk-device,drive=root',
      'virtio-blk-device,drive=config',
      'virtio-net-device,netdev=net0,mac=02:00:00:00:00:01',
    ]);
    assert.deepEqual(after(argv, '-serial'), ['chardev:console']);
    assert.deepEqual(after(argv, '-pidfile'), ['/state/x/qemu.pid']);
    assert.deepEqual(after(argv, '-runas'), ['nobody']);
    assert.match(after(argv, '-sandbox')[0] as string, /^on,.*spawn=deny/);
    // Volumes: after the config drive, raw, read-only at the device when asked, named by serial.
    const withVolumes = qemuArgv({
      ...vm,
      volumes: [
        { file: '/v/a,b.ext4', readOnly: false },
        { file: '/v/c.ext4', readOnly: true },
      ],
    });
    assert.deepEqual(after(withVolumes, '-drive').slice(2), [
      'id=vol0,if=none,format=raw,file=/v/a,,b.ext4,read-only=off',
      'id=vol1,if=none,format=raw,file=/v/c.ext4,read-only=on',
    ]);
    assert.deepEqual(after(withVolumes, '-device').slice(2, 4), [
      'virtio-blk-device,drive=vol0,serial=sbx-vol-0',
      'virtio-blk-device,drive=vol1,serial=sbx-vol-1',
    ]);
    const kvm = qemuArgv({ ...vm, accelerator: 'kvm', initrd: undefined });
    assert.deepEqual(after(kvm, '-cpu'), ['host']);
    assert.ok(!kvm.includes('-initrd'));
    assert.equal(optionValue('a,b,,c'), 'a,,b,,,,c');
  });

  it("the bench's bare boot (the floor of a cold create) shares the VMs' machine and kernel, and has nothing of ours", async () => {
    const bare = guestKernelCmdline({ bareInit: '/bin/sh' }).split(' ');
    assert.ok(bare.includes('init=/bin/sh') && bare.includes('ro') && !bare.includes('rw'), bare.join(' '));
    const image = { hash: 'h', dir: '/img', rootfs: '/img/rootfs', ext4: '/img/a,b.ext4', kernel: '/img/vmlinuz', initrd: '/img/initrd.img' };
    const argv = await bareBootArgv({ settings: { binary: 'qemu-system-x86_64', smp: 2 }, accelerator: 'kvm', memoryMiB: 1024, image });
    const machine = qemuArgv({ ...vm, accelerator: 'kvm' }).slice(2, 2 + argv.indexOf('-append') + 1);
    assert.deepEqual(argv.slice(0, machine.length), machine, 'the same machine, accelerator, CPUs, memory, kernel and initrd');
    assert.deepEqual(after(argv, '-drive'), ['id=root,if=none,format=raw,file=/img/a,,b.ext4,read-only=on']);
    for (const ours of ['-netdev', '-runas', '-sandbox', '-qmp', '-pidfile']) assert.ok(!argv.includes(ours), ours);
  });

  it('gives each VM a stable, locally administered MAC', () => {
    const mac = macAddressFor('sbx-abcdefghij');
    assert.match(mac, /^02(:[0-9a-f]{2}){5}$/);
    assert.equal(mac, macAddressFor('sbx-abcdefghij'));
    assert.notEqual(mac, macAddressFor('sbx-abcdefghik'));
  });

  it('recognises our QEMU processes by their -name, and nothing else', () => {
    const names = new ResourceNames('tst-');
    assert.equal(sessionIdOfQemu(['qemu-system-x86_64', '-name', 'guest=tst-abcdefghij,process=tst-abcdefghij'], names), 'abcdefghij');
    assert.equal(sessionIdOfQemu(['/usr/bin/qemu-system-x86_64', '-name', 'guest=sbx-abcdefghij,process=x'], names), undefined, 'another prefix');
    assert.equal(sessionIdOfQemu(['sleep', '-name', 'guest=tst-abcdefghij'], names), undefined, 'not qemu');
    assert.equal(sessionIdOfQemu(['qemu-system-x86_64'], names), undefined);
  });

  it('explains how QEMU ended', () => {
    assert.match(describeExit({ code: null, signal: 'SIGKILL' }), /killed by SIGKILL/);
    assert.match(describeExit({ code: 0, signal: null }), /powered off, rebooted or panicked/);
    assert.match(describeExit({ code: 1, signal: null }), /code 1/);
  });
});

describe('host facts and settings for the qemu runtime', () => {
  it("reads the host's TSC frequency from the kernel log, or from cpuinfo when the TSC is constant", () => {
    assert.equal(tscKhzFromKernelLog('[0.0] tsc: Detected 2445.428 MHz processor\n[1.2] tsc: Refined TSC clocksource calibration: 2445.432 MHz'), 2445432);
    assert.equal(tscKhzFromKernelLog('[0.0] tsc: Detected 2445.428 MHz processor'), 2445428);
    assert.equal(tscKhzFromKernelLog('nothing'), undefined);
    const cpuinfo = (flags: string) => `processor\t: 0\ncpu MHz\t\t: 2999.998\nflags\t\t: fpu ${flags}\n`;
    assert.equal(tscKhzFromCpuinfo(cpuinfo('tsc constant_tsc nonstop_tsc')), 2999998);
    assert.equal(tscKhzFromCpuinfo(cpuinfo('tsc')), undefined, 'a variable TSC says nothing');
  });

  it('resolves the kernel metapackage to the versioned package it depends on', () => {
    const out = 'linux-image-cloud-amd64\n  Depends: linux-image-6.1.0-31-cloud-amd64\n';
    assert.equal(resolveKernelPackage('linux-image-cloud-amd64', out), 'linux-image-6.1.0-31-cloud-amd64');
    assert.equal(resolveKernelPackage('linux-image-6.1.0-31-cloud-amd64', 'x\n  Depends: kmod\n  Depends: linux-base\n'), 'linux-image-6.1.0-31-cloud-amd64');
  });

  it('reads SBX_QEMU_* settings and refuses bad ones', () => {
    assert.deepEqual(qemuSettingsFromEnv({}), {
      binary: 'qemu-system-x86_64',
      imgBinary: 'qemu-img',
      accel: 'auto',
      smp: 2,
      kernel: undefined,
      initrd: undefined,
      bootTimeoutMs: undefined,
      vmUsers: {},
      transport: 'tcp',
    });
    assert.deepEqual(qemuSettingsFromEnv({ SBX_VM_UID_BASE: '2000000', SBX_VM_UID_COUNT: '16' }).vmUsers, { base: 2_000_000, count: 16 });
    assert.throws(() => qemuSettingsFromEnv({ SBX_VM_UID_COUNT: '0' }), /SBX_VM_UID_COUNT/);
    const set = qemuSettingsFromEnv({ SBX_QEMU_ACCEL: 'tcg', SBX_QEMU_SMP: '1', SBX_KERNEL: '/k', SBX_INITRD: '/i', SBX_QEMU_BOOT_TIMEOUT_MS: '120000' });
    assert.deepEqual([set.accel, set.smp, set.kernel, set.initrd, set.bootTimeoutMs], ['tcg', 1, '/k', '/i', 120000]);
    assert.throws(() => qemuSettingsFromEnv({ SBX_QEMU_ACCEL: 'hvf' }), /SBX_QEMU_ACCEL/);
    assert.throws(() => qemuSettingsFromEnv({ SBX_QEMU_SMP: '0' }), /SBX_QEMU_SMP/);
  });

  it('bridges the veth end and the TAP in the netns, with no address there', () => {
    const lines = tapBridgeCommands();
    assert.ok(lines.includes('tuntap add dev tap0 mode tap'));
    assert.ok(lines.includes('link set eth0 master br0') && lines.includes('link set tap0 master br0'));
    assert.ok(!lines.some((l) => l.startsWith('addr add') || l.startsWith('route add')));
  });
});

describe('runtime selection', () => {
  it('auto picks qemu only when KVM really works here, else the container, and says why', async () => {
    const names = new ResourceNames('tst-');
    // The expectation comes from the test's own probe (a KVM guest run), not from the code's.
    const kvm = await kvmRunsGuests();
    // No firecracker binary: auto's first choice is out of the way whatever the host has.
    const noFirecracker = { ...firecrackerSettingsFromEnv({}), firecrackerBin: '/nonexistent/firecracker' };
    const picked = await RUNTIMES.select('auto', names, {
      container: containerSettingsFromEnv(process.env),
      qemu: qemuSettingsFromEnv({}),
      firecracker: noFirecracker,
    });
    if (kvm.works) {
      assert.equal(picked.runtime.name, 'qemu', `KVM runs guests here (${kvm.detail}): ${picked.reason}`);
      assert.equal((picked.runtime as QemuRuntime).accelerator, 'kvm');
    } else {
      assert.equal(picked.runtime.name, 'container', `KVM does not run guests here (${kvm.detail}): ${picked.reason}`);
      assert.match(picked.reason, /^auto: container \(runc.*\) \(passed over firecracker: .+; qemu: .+\)$/);
    }
  });

  it("a nested host's kvm-pvm is not taken for KVM (its guests' kernels hang), unless SBX_QEMU_ACCEL=kvm says so", async () => {
    const pvm = await probeKvm('qemu-system-x86_64', undefined, { pvmModule: os.tmpdir() });
    assert.deepEqual([pvm.usable, /kvm-pvm/.test(pvm.reason)], [false, true], pvm.reason);
    const forced = await probeKvm('qemu-system-x86_64', undefined, { pvmModule: os.tmpdir(), forced: true });
    assert.doesNotMatch(forced.reason, /kvm-pvm/);
  });

  it('qemu says which accelerator it uses and why, and gives TCG a long boot timeout', async () => {
    const settings = { ...RUNTIMES.settingsFromEnv(process.env), qemu: { ...qemuSettingsFromEnv({}), accel: 'tcg' as const } };
    const picked = await RUNTIMES.select('qemu', new ResourceNames('tst-'), settings);
    const runtime = picked.runtime as QemuRuntime;
    assert.equal(runtime.accelerator, 'tcg');
    assert.equal(runtime.capabilities.networkAttachment, 'tap');
    assert.equal(runtime.capabilities.bootTimeoutMs, 90_000);
    assert.match(picked.reason, /tcg: SBX_QEMU_ACCEL=tcg/);
  });
});

describe('ext4 images: root image size, config drive', () => {
  it('sizes the root image with room for ext4 and the sandbox, in 64 MiB steps', () => {
    const MiB = 2 ** 20;
    const size = rootImageSize(540e6, 1024);
    assert.equal(size % (64 * MiB), 0);
    assert.ok(size >= 540e6 * 1.25 + 1024 * MiB && size < 540e6 * 1.25 + 1024 * MiB + 64 * MiB);
    const argv = mkfsExt4Argv({ source: '/r', image: '/i.ext4', sizeBytes: 4 * MiB, label: 'sbx-root', journal: true });
    assert.deepEqual(argv.slice(-4), ['-d', '/r', '/i.ext4', '4096k']);
    assert.ok(!argv.includes('^has_journal'));
    assert.ok(configDriveArgv('/c', '/d').includes('^has_journal'), 'the read-only config drive has no journal');
    assert.throws(() => mkfsExt4Argv({ source: '/r', image: '/i', sizeBytes: MiB, label: 'x'.repeat(17), journal: false }), /longer than 16/);
  });

  it('makes a config drive that keeps owners and modes (sshd StrictModes) and is itself 0600', async () => {
    const dir = path.join(scratch, 'config');
    await mkdir(dir, { mode: 0o711 });
    await writeFile(path.join(dir, 'authorized_keys'), 'ssh-ed25519 AAAA test\n', { mode: 0o600 });
    await chown(path.join(dir, 'authorized_keys'), 1000, 1000);
    await writeFile(path.join(dir, 'ssh_host_ed25519_key'), 'PRIVATE\n', { mode: 0o600 });
    await writeFile(path.join(dir, 'sandbox.env'), 'SANDBOX_ID=x\n', { mode: 0o644 });
    const image = path.join(scratch, 'config.ext4');
    await buildConfigDrive(dir, image);
    assert.equal((await stat(image)).mode & 0o777, 0o600);
    assert.equal((await stat(image)).size, 4 * 2 ** 20);
    const listing = (await run(['debugfs', '-R', 'ls -l /', image])).stdout;
    assert.match(listing, /100600 \(1\)\s+1000\s+1000\s+\d+ .*authorized_keys/);
    assert.match(listing, /100600 \(1\)\s+0\s+0\s+\d+ .*ssh_host_ed25519_key/);
    assert.match(listing, /100644 \(1\)\s+0\s+0\s+\d+ .*sandbox\.env/);
    const content = (await run(['debugfs', '-R', 'cat /authorized_keys', image])).stdout;
    assert.equal(content, 'ssh-ed25519 AAAA test\n');
    const label = (await run(['e2label', image])).stdout.trim();
    assert.equal(label, 'sbx-config');
  });

  it('truncates timestamps to whole seconds (what mkfs.ext4 -d keeps), without following symlinks', async () => {
    const tree = path.join(scratch, 'tree');
    await mkdir(path.join(tree, 'fonts'), { recursive: true });
    await writeFile(path.join(tree, 'fonts', 'a.ttf'), 'x');
    await utimes(path.join(tree, 'fonts'), 1000.5, 2000.25);
    await run(['ln', '-s', '/etc/hostname', path.join(tree, 'link')]);
    const hostBefore = await stat('/etc/hostname', { bigint: true });
    assert.ok((await truncateTimestamps(tree)) >= 1);
    const fonts = await stat(path.join(tree, 'fonts'), { bigint: true });
    assert.equal(fonts.mtimeNs, 2000n * 1_000_000_000n);
    assert.equal((await stat('/etc/hostname', { bigint: true })).mtimeNs, hostBefore.mtimeNs, 'the link target is untouched');
    assert.equal(await truncateTimestamps(tree), 0, 'idempotent');
  });
});

/** A minimal ELF64 little-endian file with a .modinfo section, as a kernel module has. */
function fakeModule(modinfo: string[]): Buffer {
  const info = Buffer.from(modinfo.join('\0') + '\0');
  const names = Buffer.from('\0.modinfo\0.shstrtab\0');
  const header = Buffer.alloc(64);
  header.writeUInt32BE(0x7f454c46, 0);
  header[4] = 2; // 64-bit
  header[5] = 1; // little-endian
  const infoAt = 64;
  const namesAt = infoAt + info.length;
  const shoff = namesAt + names.length;
  header.writeBigUInt64LE(BigInt(shoff), 0x28);
  header.writeUInt16LE(64, 0x3a); // e_shentsize
  header.writeUInt16LE(3, 0x3c); // e_shnum: null, .modinfo, .shstrtab
  header.writeUInt16LE(2, 0x3e); // e_shstrndx
  const section = (name: number, offset: number, size: number) => {
    const sh = Buffer.alloc(64);
    sh.writeUInt32LE(name, 0);
    sh.writeBigUInt64LE(BigInt(offset), 0x18);
    sh.writeBigUInt64LE(BigInt(size), 0x20);
    return sh;
  };
  return Buffer.concat([header, info, names, section(0, 0, 0), section(1, infoAt, info.length), section(10, namesAt, names.length)]);
}

describe('the VM uid pool', () => {
  it('leases each VMM a uid of its own, records it, gives it back, and never leases one a process runs under', async () => {
    const base = 3_000_000 + Math.floor(Math.random() * 1_000_000);
    const pool = new VmUserPool({ base, count: 3 });
    const recorded: string[] = [];
    const cleanup = new CleanupStack();
    // A process already running under the first uid (a VMM that outlived a crash, say).
    const squatter = spawn('setpriv', [`--reuid=${base}`, `--regid=${base}`, '--clear-groups', 'sleep', '30'], { stdio: 'ignore' });
    try {
      for (let i = 0; i < 50 && (await processUid(squatter.pid ?? -1)) !== base; i++) await sleep(20);
      const [a, b] = await Promise.all([pool.lease(cleanup, (kind, name) => recorded.push(`${kind}:${name}`)), pool.lease(cleanup)]);
      assert.deepEqual([a, b].map((u) => u.uid).sort(), [base + 1, base + 2], 'the squatted uid is skipped, and two leases differ');
      assert.deepEqual([a.gid, b.gid], [a.uid, b.uid], 'a group of its own');
      assert.equal(recorded.length, 1);
      assert.match(recorded[0] as string, new RegExp(`^vm-user:${base + 1}$|^vm-user:${base + 2}$`));
      await assert.rejects(pool.lease(new CleanupStack()), /every VM uid is taken \(SBX_VM_UID_BASE=\d+, SBX_VM_UID_COUNT=3\)/);
      await cleanup.run();
      assert.equal(pool.inUse, 0);
      pool.claim(base + 1); // adopted after a restart
      assert.equal((await pool.lease(new CleanupStack())).uid, base + 2);
    } finally {
      squatter.kill('SIGKILL');
    }
  });

  it('derives a range per resource prefix unless SBX_VM_UID_BASE says otherwise, and refuses a bad one', () => {
    assert.deepEqual(vmUserRange({}, 'sbx-'), { base: 900_000, count: 4_096 });
    const other = vmUserRange({}, 'tzz-');
    assert.ok(other.base > 900_000 && (other.base - 900_000) % 4_096 === 0);
    assert.deepEqual(vmUserRange({ base: 123_456, count: 8 }, 'tzz-'), { base: 123_456, count: 8 });
    assert.throws(() => new VmUserPool({ base: 0, count: 10 }), /VM uid range/);
    assert.throws(() => new VmUserPool({ base: 2 ** 32 - 5, count: 10 }), /VM uid range/);
  });
});

describe('a VMM cgroup (files checked in a stand-in hierarchy, v1 and v2)', () => {
  it('v2: delegates memory, cpu and pids to the parent and writes the limits; v1: one directory per controller', async () => {
    const root = await mkdtemp(path.join(os.tmpdir(), 'vm-cgroup-'));
    try {
      // What cgroupfs would show: the root's and the parent's subtree_control (one enabled already).
      await writeFile(path.join(root, 'cgroup.subtree_control'), 'cpu\n');
      await mkdir(path.join(root, 'tzz'));
      await writeFile(path.join(root, 'tzz', 'cgroup.subtree_control'), '');
      const recorded: string[] = [];
      const v2 = await VmCgroup.create(
        {
          version: 2,
          parent: 'tzz',
          name: 'tzz-abcdefghij',
          limits: { memoryMiB: 1024, vcpus: 2, pidsMax: 128 },
          record: (kind, name) => recorded.push(`${kind}:${name}`),
        },
        root,
      );
      const dir = path.join(root, 'tzz', 'tzz-abcdefghij');
      assert.deepEqual(v2.dirs, [dir]);
      assert.deepEqual(recorded, [`cgroup:${dir}`]);
      assert.equal(await readFile(path.join(root, 'cgroup.subtree_control'), 'utf8'), 'cpu\n+memory +pids');
      assert.equal(await readFile(path.join(root, 'tzz', 'cgroup.subtree_control'), 'utf8'), '+memory +cpu +pids');
      assert.equal(await readFile(path.join(dir, 'memory.max'), 'utf8'), String((1024 + 128) * 1024 * 1024));
      assert.equal(await readFile(path.join(dir, 'cpu.max'), 'utf8'), '200000 100000');
      assert.equal(await readFile(path.join(dir, 'pids.max'), 'utf8'), '128');
      await v2.add(4242);
      assert.equal(await readFile(path.join(dir, 'cgroup.procs'), 'utf8'), '4242');

      const v1 = await VmCgroup.create({ version: 1, parent: 'tzz', name: 'tzz-klmnopqrst', limits: { memoryMiB: 512, vcpus: 1, pidsMax: 64 } }, root);
      assert.deepEqual(
        v1.dirs,
        ['memory', 'cpu', 'pids'].map((c) => path.join(root, c, 'tzz', 'tzz-klmnopqrst')),
      );
      assert.equal(await readFile(path.join(root, 'cpu', 'tzz', 'tzz-klmnopqrst', 'cpu.cfs_quota_us'), 'utf8'), '100000');
      assert.equal(await readFile(path.join(root, 'memory', 'tzz', 'tzz-klmnopqrst', 'memory.limit_in_bytes'), 'utf8'), String((512 + 128) * 1024 * 1024));
      await assert.rejects(VmCgroup.create({ version: 2, parent: '../x', name: 'y', limits: { memoryMiB: 1, vcpus: 1 } }, root), /invalid cgroup name/);
    } finally {
      await rm(root, { recursive: true, force: true });
    }
  });
});
