import { GUEST_INIT } from '../../../guest/contract.js';

/**
 * The guest kernel's command line. Firecracker adds to it before booting: `root=/dev/vda rw`
 * for the root drive and, on x86 without PCI, one `virtio_mmio.device=4K@0x<addr>:<irq>`
 * per virtio device (that is how the kernel finds them). What we pass must leave room for
 * that: the whole line, NUL included, must fit in 2048 bytes or the VM does not boot.
 */
export const DEFAULT_BOOT_ARGS = `console=ttyS0 reboot=k panic=1 pci=off quiet init=${GUEST_INIT}`;

/** The x86 and arm64 kernels' COMMAND_LINE_SIZE; Firecracker's CMDLINE_MAX_SIZE. */
export const KERNEL_CMDLINE_MAX_BYTES = 2048;

/** What Firecracker appends for a read-write root drive without a partuuid. */
const ROOT_ARGS = ' root=/dev/vda rw';
/** The longest form of what it appends per virtio-mmio device (two-digit IRQ). */
const MMIO_DEVICE_ARGS = ' virtio_mmio.device=4K@0xd0000000:10';

/** The most bytes Firecracker may add to our boot args for `virtioDevices` devices, NUL included. */
export function firecrackerAppendedBytes(virtioDevices: number): number {
  return ROOT_ARGS.length + virtioDevices * MMIO_DEVICE_ARGS.length + 1;
}

/**
 * Throws a clear error unless `bootArgs` fits in the kernel command line once Firecracker
 * has added its part. Checked before any process is started, because Firecracker's own
 * refusal ("Invalid kernel command line") comes late and names neither cause nor size.
 */
export function assertBootArgsFit(bootArgs: string, virtioDevices: number): void {
  if (/[\0\n]/.test(bootArgs)) throw new Error('boot_args must not contain NUL or newline characters');
  const bytes = Buffer.byteLength(bootArgs);
  if (bytes > KERNEL_CMDLINE_MAX_BYTES) {
    throw new Error(`boot_args is ${bytes} bytes long; the kernel command line holds at most ${KERNEL_CMDLINE_MAX_BYTES}`);
  }
  const budget = KERNEL_CMDLINE_MAX_BYTES - firecrackerAppendedBytes(virtioDevices);
  if (bytes > budget) {
    throw new Error(
      `boot_args is ${bytes} bytes long; with the ${firecrackerAppendedBytes(virtioDevices)} bytes Firecracker adds for ` +
        `the root drive and ${virtioDevices} virtio devices, at most ${budget} fit in the ${KERNEL_CMDLINE_MAX_BYTES}-byte kernel command line`,
    );
  }
}
