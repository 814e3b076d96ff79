import type { Logger } from '../api/types.js';

/** Device ids, fixed so that a snapshot taken of one VM names the same devices in every clone. */
export const ROOT_DRIVE_ID = 'rootfs';
export const CONFIG_DRIVE_ID = 'config';
export const GUEST_IFACE_ID = 'eth0';

/**
 * Everything the boot sequence needs to know about one VM. Every path is the path as the
 * Firecracker process sees it: inside the chroot when it runs under the jailer (the names
 * match ChrootLayout.vmPaths, so `{ ...layout.vmPaths, ... }` fills them), a host path
 * otherwise.
 */
export interface FirecrackerVmSpec {
  vcpuCount: number;
  memoryMiB: number;
  /** Uncompressed kernel (vmlinux) of the guest image. */
  kernelImagePath: string;
  /** The image's initrd, which carries the virtio modules of Debian's cloud kernel. */
  initrdPath?: string;
  /** Defaults to DEFAULT_BOOT_ARGS; checked against the kernel's 2048-byte limit. */
  bootArgs?: string;
  /** The session's own writable copy of the image's ext4 rootfs: /dev/vda in the guest. */
  rootfsPath: string;
  /** The session's config drive (ext4 from the config dir), read-only: /dev/vdb in the guest. */
  configDrivePath: string;
  /** The session's volumes (docs/volumes.md), a drive each after the config drive: /dev/vdc, vdd, ... in the guest. */
  volumePaths?: ReadonlyArray<{ path: string; readOnly: boolean }>;
  /**
   * The TAP device, in the network namespace the Firecracker process runs in. Absent: the VM
   * gets no NIC at all (reached over vsock only, docs/transport.md).
   */
  tapName?: string;
  /** The guest's IPv4 address (with a TAP); the MAC is derived from it. */
  guestAddress?: string;
  /** The session's address lease index; the vsock CID is derived from it (absent: no lease, the first guest CID). */
  leaseIndex?: number;
  /** Where Firecracker listens for host-initiated vsock connections (in the session dir, or the jail). */
  vsockUdsPath: string;
  /** Firecracker's own log (not the guest console, which is its standard output). */
  logger?: Pick<Logger, 'log_path' | 'level'>;
}
