/**
 * The guest kernel's command line, shared by the VM runtimes (qemu now, Firecracker next).
 *
 * What each option is for, and what Firecracker needs:
 *   console=ttyS0     the serial port is the console: the host keeps it as the console log
 *                     (Firecracker: its serial device; QEMU: -serial).
 *   reboot=k          reboot through the keyboard controller. Firecracker exits when the
 *                     guest does that (it has no other way to learn of a guest reboot).
 *   panic=1           a panic reboots after 1 s instead of hanging: the VM ends, the host
 *                     sees its process exit and fails the session with the console log.
 *   pci=off           there is no PCI bus (virtio-mmio only): skip probing for it.
 *   root=/dev/vda rw  the first virtio disk is the root (a per-session copy-on-write layer
 *                     over the shared image), read-write. Read by our initrd's /init.
 *   init=/sbin/sandbox-init
 *                     our PID 1. The initrd hands over to it; sandbox-init also checks for
 *                     this exact option before it ever reboots (so that it cannot reboot a
 *                     host when run as a container's init).
 *   quiet             only warnings and errors on the console: printing every boot line
 *                     through an emulated UART costs seconds under TCG.
 *
 * The kernel must also learn where the virtio-mmio devices are. QEMU's microvm lists them in
 * its ACPI tables (DSDT), which is how Debian's cloud kernel finds them: that kernel lacks
 * CONFIG_VIRTIO_MMIO_CMDLINE_DEVICES, so it cannot take the other way, the
 * `virtio_mmio.device=<size>@<addr>:<irq>` options that Firecracker appends to the command
 * line (see src/runtimes/firecracker/boot/kernel-args.ts; Firecracker also appends
 * `root=/dev/vda rw` itself). For Firecracker, check that its ACPI tables describe the
 * devices (ACPI support for x86_64 came with firecracker-microvm/firecracker#4428), or use a
 * kernel with that option built in.
 *
 * Another kernel can be used (SBX_KERNEL, SBX_INITRD): it needs a serial console, ext4,
 * virtio-mmio, virtio-blk and virtio-net, either built in or as modules loaded by its initrd,
 * and an initrd that honours root= and init= as ours does (or none, with everything built in:
 * then the kernel reads root= and init= itself).
 */
import { GUEST_INIT } from './contract.js';

/** The root disk: the first virtio disk. The config drive is the second (/dev/vdb). */
export const GUEST_ROOT_DEVICE = '/dev/vda';

export interface KernelCmdlineOptions {
  /** Print only warnings and errors during boot (default true). */
  quiet?: boolean;
  /** More options, appended as given (e.g. for debugging: "loglevel=8"). */
  extra?: readonly string[];
  /**
   * Another PID 1 than sandbox-init, mounted read-only: the bench's bare boot of the image to
   * a shell (`/bin/sh`, the floor of a VM's cold create: bench/qemu-floor.ts).
   */
  bareInit?: string;
}

export function guestKernelCmdline(opts: KernelCmdlineOptions = {}): string {
  const args = [
    'console=ttyS0',
    'reboot=k',
    'panic=1',
    'pci=off',
    `root=${GUEST_ROOT_DEVICE}`,
    opts.bareInit ? 'ro' : 'rw',
    `init=${opts.bareInit ?? GUEST_INIT}`,
    ...(opts.quiet === false ? [] : ['quiet']),
    ...(opts.extra ?? []),
  ];
  for (const arg of args) {
    if (!/^[A-Za-z0-9_.,:=/@-]+$/.test(arg)) throw new Error(`unsafe kernel option "${arg}"`);
  }
  return args.join(' ');
}
