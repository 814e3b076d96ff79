/**
 * The QEMU command line of one sandbox VM, as an argument vector (pure, unit-tested).
 *
 * The machine is `microvm`, QEMU's model of Firecracker: no PCI, no firmware menu, virtio
 * devices on virtio-mmio, the kernel booted directly. The same kernel, initrd, root image
 * and config drive format boot under Firecracker.
 */
import { createHash } from 'node:crypto';
import type { Accelerator } from '../runtime.js';
import { cpuModel } from './accelerator.js';

export interface QemuVmConfig {
  /** <prefix><sessionId>: the VM's name, and its process name (found again by reclaim). */
  name: string;
  accelerator: Accelerator;
  smp: number;
  memoryMiB: number;
  kernel: string;
  /** Omitted for a kernel with everything built in. */
  initrd?: string;
  cmdline: string;
  /** The per-session copy-on-write layer over the image's rootfs.ext4 (qcow2): /dev/vda. */
  rootDisk: string;
  /** 'qcow2' (default) for the layer above; 'raw' for a whole copy of the ext4. */
  rootDiskFormat?: 'qcow2' | 'raw';
  /** The per-session config drive (raw ext4): /dev/vdb. */
  configDrive: string;
  /** Volumes (docs/volumes.md): a raw virtio-blk drive each, after the config drive, serial sbx-vol-<i>. */
  volumes?: ReadonlyArray<{ file: string; readOnly: boolean }>;
  /** The TAP device inside the session's netns. */
  tap: string;
  mac: string;
  pidFile: string;
  /** The QMP monitor's Unix socket (pause and resume: qmp.ts); omitted: no monitor. */
  qmpSocket?: string;
  /**
   * The unprivileged user QEMU switches to once set up (it starts as root for the TAP):
   * `uid:gid` (the VM's own, from the pool) or a user name. Omitted when QEMU is started
   * unprivileged already.
   */
  runAs?: string;
}

/** The serial of the i-th volume's disk, by which sandbox-init finds it (/sys/block/vd* /serial). */
export function qemuVolumeSerial(index: number): string {
  return `sbx-vol-${index}`;
}

/** The TCG translation cache, MiB (QEMU's default is 1024). */
export const TCG_TB_SIZE_MIB = 256;

export function qemuArgv(vm: QemuVmConfig): string[] {
  return [
    ...['-name', `guest=${vm.name},process=${vm.name}`],
    ...qemuMachineArgv(vm),
    // The root disk. cache=unsafe: the layer is thrown away with the session, so the guest's
    // flushes need not reach the host's disk. discard: freed blocks shrink the layer.
    ...['-drive', `id=root,if=none,format=${vm.rootDiskFormat ?? 'qcow2'},file=${optionValue(vm.rootDisk)},cache=unsafe,discard=unmap`],
    ...['-device', 'virtio-blk-device,drive=root'],
    ...['-drive', `id=config,if=none,format=raw,file=${optionValue(vm.configDrive)},read-only=on`],
    ...['-device', 'virtio-blk-device,drive=config'],
    // Volumes: the host's cache and flushes as usual (their data outlives the VM, unlike the
    // root layer's), QEMU's image lock on (a second QEMU cannot open one for writing), read-only
    // at the device when asked. The serial names it for the guest (the order of the list).
    ...(vm.volumes ?? []).flatMap((v, i) => [
      ...['-drive', `id=vol${i},if=none,format=raw,file=${optionValue(v.file)},read-only=${v.readOnly ? 'on' : 'off'}`],
      ...['-device', `virtio-blk-device,drive=vol${i},serial=${qemuVolumeSerial(i)}`],
    ]),
    ...['-netdev', `tap,id=net0,ifname=${vm.tap},script=no,downscript=no`],
    ...['-device', `virtio-net-device,netdev=net0,mac=${vm.mac}`],
    // The serial console goes to QEMU's stdout, which the runtime points at the console log
    // (QEMU's own errors go to stderr, the same file). signal=off: stdin is not a terminal.
    ...['-chardev', 'stdio,id=console,signal=off'],
    ...['-serial', 'chardev:console'],
    ...['-pidfile', vm.pidFile],
    // The monitor, for pause (stop) and resume (cont): a socket made while QEMU is still root,
    // in the session dir (0700, root's): the VM's own user cannot reach it.
    ...(vm.qmpSocket ? ['-qmp', `unix:${optionValue(vm.qmpSocket)},server=on,wait=off`] : []),
    // Defence in depth for the process that handles everything the guest does to its
    // devices: a seccomp filter (no fork/exec, no obsolete or scheduling calls), and no root
    // once the disks and the TAP are open (-runas). elevateprivileges must stay allowed:
    // QEMU changes user after installing the filter (denying it: killed by SIGSYS), and as
    // an unprivileged user it has nothing left to elevate.
    ...['-sandbox', 'on,obsolete=deny,spawn=deny,resourcecontrol=deny'],
    ...(vm.runAs ? ['-runas', vm.runAs] : []),
  ];
}

/**
 * The machine, its accelerator, CPUs and memory, and the kernel it boots directly: what every
 * VM of ours has, and what the bench's bare boot of the image shares with them (bench/qemu-floor.ts).
 */
export function qemuMachineArgv(vm: Pick<QemuVmConfig, 'accelerator' | 'smp' | 'memoryMiB' | 'kernel' | 'initrd' | 'cmdline'>): string[] {
  return [
    // pit and pic: without them, the guest kernel hangs calibrating its TSC (seen under TCG).
    // rtc: the guest's clock starts at the host's time. ACPI (on by default) is how Debian's
    // kernel finds the virtio-mmio devices (see src/guest/kernel-cmdline.ts).
    ...['-machine', 'microvm,pit=on,pic=on,rtc=on'],
    // TCG's translated-code cache is 1 GiB by default, on top of the guest's memory: capped,
    // so that the VM fits its cgroup (qemu-runtime.ts counts it in the memory limit).
    ...['-accel', vm.accelerator === 'tcg' ? `tcg,tb-size=${TCG_TB_SIZE_MIB}` : vm.accelerator],
    ...['-cpu', cpuModel(vm.accelerator)],
    ...['-smp', String(vm.smp)],
    ...['-m', `${vm.memoryMiB}M`],
    // Nothing but what is listed here: no default NIC, no display, no monitor (qemuArgv adds a QMP socket).
    '-nodefaults',
    '-no-user-config',
    ...['-display', 'none'],
    // A guest reboot ends the VM: sandbox-init reboots to power off, and so do the kernel's
    // panic=1 and the initrd when the root cannot be mounted.
    '-no-reboot',
    ...['-kernel', vm.kernel],
    ...(vm.initrd ? ['-initrd', vm.initrd] : []),
    ...['-append', vm.cmdline],
  ];
}

/** QEMU option values are comma-separated: a comma inside a value is written twice. */
export function optionValue(value: string): string {
  return value.replace(/,/g, ',,');
}

/**
 * A MAC address of the session's own: locally administered (02:...), derived from the name so
 * that a console log or a packet capture can be matched to its session.
 */
export function macAddressFor(name: string): string {
  const bytes = createHash('sha256').update(name).digest().subarray(0, 5);
  return ['02', ...[...bytes].map((b) => b.toString(16).padStart(2, '0'))].join(':');
}
