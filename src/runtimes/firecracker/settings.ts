import { transportChoiceFromEnv, type TransportChoice } from '../../transport/settings.js';
import { envInt, envOnOff, envOptional, envString, parseScreenSize, type Env, type ScreenSize } from '../../util/env.js';
import { sandboxMemoryMiBFromEnv } from '../sandbox-settings.js';
import { vmUserSettingsFromEnv, type VmUserSettings } from '../vm/vm-user-pool.js';

/**
 * How the Firecracker runtime runs its microVMs. Read from the environment
 * (firecrackerSettingsFromEnv); every variable is optional.
 */
export interface FirecrackerSettings {
  /** FIRECRACKER_BIN: the firecracker binary (default: `firecracker` on PATH). */
  firecrackerBin?: string;
  /** JAILER_BIN: the jailer binary of the same release (default: `jailer` on PATH). */
  jailerBin?: string;
  /**
   * SBX_FC_JAILER: 'auto' (default) and 'on' both jail every VM, and the runtime refuses to
   * start without a jailer binary; 'off' (development only, and only when said explicitly):
   * Firecracker runs as root, unconfined, in the session's netns.
   */
  jailer: 'auto' | 'on' | 'off';
  /** SBX_FC_CHROOT_DIR: where the jailer makes each VM's chroot (default /srv/jailer). */
  chrootBaseDir: string;
  /**
   * SBX_VM_UID_BASE / SBX_VM_UID_COUNT: the uids (and gids) jailed VMMs run as, one of its
   * own for each VM (vm-user-pool.ts). They replace SBX_FC_UID / SBX_FC_GID.
   */
  vmUsers: VmUserSettings;
  /** SBX_FC_VCPUS: virtual CPUs per microVM (default 2). */
  vcpus: number;
  /**
   * SBX_FC_KERNEL: an uncompressed vmlinux to boot instead of the one unpacked from the guest
   * image's kernel; SBX_FC_INITRD likewise (see kernel/vmlinux.ts and the README).
   */
  kernel?: string;
  initrd?: string;
  /** SBX_FC_API_TIMEOUT_MS: how long a new VMM may take to answer on its API socket (10 s). */
  apiTimeoutMs: number;
  /** SBX_FC_BOOT_TIMEOUT_MS: from InstanceStart to SSH and display answering (default 30 s). */
  bootTimeoutMs: number;
  /**
   * SBX_FC_SNAPSHOTS=on: build a snapshot base of the image at start-up (jailed only)
   * and start sessions of its screen size by restoring it (see snapshot/). Default off.
   */
  snapshots: boolean;
  /** The snapshot base's screen (SBX_FC_TEMPLATE_SCREEN, default 1024x768) and memory (SBX_MEMORY_MIB). */
  snapshotBaseScreen: ScreenSize;
  snapshotBaseMemoryMiB: number;
  /**
   * SBX_TRANSPORT (default tcp): `vsock`, `unix` and `auto` reach a VM without egress over
   * Firecracker's hybrid vsock (the jail's vsock socket), and give it no NIC at all.
   */
  transport?: TransportChoice;
}

export function firecrackerSettingsFromEnv(env: Env): FirecrackerSettings {
  for (const gone of ['SBX_FC_UID', 'SBX_FC_GID']) {
    if (env[gone]) throw new Error(`${gone} is no longer used: every VM runs under a uid/gid of its own from SBX_VM_UID_BASE (SBX_VM_UID_COUNT of them)`);
  }
  const jailer = env.SBX_FC_JAILER || 'auto';
  if (jailer !== 'auto' && jailer !== 'on' && jailer !== 'off') {
    throw new Error(`SBX_FC_JAILER must be auto, on or off, got "${jailer}"`);
  }
  const vcpus = envInt('SBX_FC_VCPUS', 2, env);
  if (vcpus < 1 || vcpus > 32) throw new Error(`SBX_FC_VCPUS must be between 1 and 32 (Firecracker's range), got ${vcpus}`);
  return {
    firecrackerBin: envOptional(env, 'FIRECRACKER_BIN'),
    jailerBin: envOptional(env, 'JAILER_BIN'),
    jailer,
    chrootBaseDir: envString(env, 'SBX_FC_CHROOT_DIR', '/srv/jailer'),
    vmUsers: vmUserSettingsFromEnv(env),
    vcpus,
    kernel: envOptional(env, 'SBX_FC_KERNEL'),
    initrd: envOptional(env, 'SBX_FC_INITRD'),
    apiTimeoutMs: envInt('SBX_FC_API_TIMEOUT_MS', 10_000, env),
    bootTimeoutMs: envInt('SBX_FC_BOOT_TIMEOUT_MS', 30_000, env),
    snapshots: envOnOff('SBX_FC_SNAPSHOTS', false, env),
    snapshotBaseScreen: parseScreenSize(envString(env, 'SBX_FC_TEMPLATE_SCREEN', '1024x768'), 'SBX_FC_TEMPLATE_SCREEN'),
    snapshotBaseMemoryMiB: sandboxMemoryMiBFromEnv(env),
    transport: transportChoiceFromEnv(env),
  };
}
