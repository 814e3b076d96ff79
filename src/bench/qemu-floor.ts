import { spawn } from 'node:child_process';
import type { GuestImage } from '../guest/image/image-store.js';
import { guestKernelCmdline } from '../guest/kernel-cmdline.js';
import { hostTscKhz } from '../runtimes/qemu/accelerator.js';
import { optionValue, qemuMachineArgv } from '../runtimes/qemu/qemu-command.js';
import type { QemuSettings } from '../runtimes/qemu/settings.js';
import type { Accelerator } from '../runtimes/runtime.js';
import { initrdFor } from '../runtimes/vm/vm-common.js';

/**
 * The floor of a QEMU cold create (issue 27): a bare boot of the same image, with the same
 * machine, accelerator, CPUs, memory, kernel, initrd and kernel options (tsc_early_khz under
 * TCG, quiet), to the first line its shell prints on the serial console. What it leaves out
 * is ours: no network (no TAP, no netns), no config drive, no per-session disk layer (the
 * image's rootfs.ext4 read-only), no cgroup, no -runas, no sandbox-init. The initrd's /init
 * mounts the root and hands PID 1 to `/bin/sh` (init=/bin/sh, ro); once it says so on the
 * console, a command is typed (again every 100 ms until it runs: the console's line
 * discipline keeps what the shell has not read yet) whose output differs from its echo:
 * `echo SBX-FLOOR-$((6*7))` prints SBX-FLOOR-42. Timed from QEMU's spawn.
 */
const SHELL = '/bin/sh';
const COMMAND = 'echo SBX-FLOOR-$((6*7))\n';
const MARKER = 'SBX-FLOOR-42';
/** The initrd's last line before switch_root (src/guest/image/initrd-init.ts). */
const HANDING_OVER = `starting ${SHELL}`;
const RETYPE_MS = 100;
const TIMEOUT_MS = 180_000;

export interface BareBootVm {
  settings: Pick<QemuSettings, 'binary' | 'smp' | 'kernel' | 'initrd'>;
  accelerator: Accelerator;
  memoryMiB: number;
  image: GuestImage;
}

/** The bare boot's command line (pure but for the host's TSC rate, read under TCG as the runtime does). */
export async function bareBootArgv(vm: BareBootVm): Promise<string[]> {
  const tscKhz = vm.accelerator === 'tcg' ? await hostTscKhz() : undefined;
  return [
    ...qemuMachineArgv({
      accelerator: vm.accelerator,
      smp: vm.settings.smp,
      memoryMiB: vm.memoryMiB,
      kernel: vm.settings.kernel ?? vm.image.kernel,
      initrd: initrdFor(vm.image, vm.settings),
      cmdline: guestKernelCmdline({ bareInit: SHELL, extra: tscKhz ? [`tsc_early_khz=${tscKhz}`] : [] }),
    }),
    ...['-drive', `id=root,if=none,format=raw,file=${optionValue(vm.image.ext4)},read-only=on`],
    ...['-device', 'virtio-blk-device,drive=root'],
    ...['-chardev', 'stdio,id=console,signal=off'],
    ...['-serial', 'chardev:console'],
  ];
}

/** `n` bare boots, one after the other, each after an untimed first (the image's files read once). */
export async function bareQemuBoots(vm: BareBootVm, n: number): Promise<number[]> {
  const argv = await bareBootArgv(vm);
  const samples: number[] = [];
  for (let i = 0; i < n + 1; i++) {
    const ms = await bootToShell(vm.settings.binary, argv);
    if (i > 0) samples.push(ms);
  }
  return samples;
}

function bootToShell(binary: string, argv: readonly string[]): Promise<number> {
  return new Promise((resolve, reject) => {
    const started = performance.now();
    const child = spawn(binary, argv, { stdio: ['pipe', 'pipe', 'pipe'] });
    let serial = '';
    let stderr = '';
    let typing: NodeJS.Timeout | undefined;
    let result: { ms: number } | { err: Error } | undefined;
    const finish = (outcome: { ms: number } | { err: Error }) => {
      if (result) return;
      result = outcome;
      clearInterval(typing);
      clearTimeout(timer);
      child.kill('SIGKILL');
    };
    const timer = setTimeout(() => finish({ err: new Error(`no shell within ${TIMEOUT_MS} ms; console: ${serial.slice(-500)}`) }), TIMEOUT_MS);
    const type = () => child.stdin.write(COMMAND);
    child.stdin.on('error', () => undefined); // QEMU gone: its exit says why
    child.stdout.on('data', (chunk: Buffer) => {
      serial = (serial + chunk.toString('utf8')).slice(-4096);
      if (serial.includes(MARKER)) finish({ ms: performance.now() - started });
      else if (!typing && serial.includes(HANDING_OVER)) {
        type();
        typing = setInterval(type, RETYPE_MS);
      }
    });
    child.stderr.on('data', (chunk: Buffer) => (stderr = (stderr + chunk.toString('utf8')).slice(-2048)));
    child.on('error', (err) => finish({ err }));
    child.on('exit', (code, signal) => {
      finish({ err: new Error(`the bare QEMU boot ended (${signal ?? code}) before its shell answered: ${stderr.trim()} / ${serial.slice(-500)}`) });
      // Settled once QEMU is gone: the next boot never overlaps this one.
      if (result && 'ms' in result) resolve(result.ms);
      else if (result) reject(result.err);
    });
  });
}
