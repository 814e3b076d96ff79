import { transportChoiceFromEnv, type TransportChoice } from '../../transport/settings.js';
import { envInt, envOptional, envString, type Env } from '../../util/env.js';
import { vmUserSettingsFromEnv, type VmUserSettings } from '../vm/vm-user-pool.js';

/** How the qemu runtime runs its VMs. Read from the environment (qemuSettingsFromEnv). */
export interface QemuSettings {
  /** SBX_QEMU_BIN: the QEMU system emulator (default qemu-system-x86_64 on PATH). */
  binary: string;
  /** SBX_QEMU_IMG: qemu-img, which makes the per-session copy-on-write disks. */
  imgBinary: string;
  /** SBX_QEMU_ACCEL: 'kvm', 'tcg' (software), or 'auto' (KVM if it works here, else TCG). */
  accel: 'auto' | 'kvm' | 'tcg';
  /** SBX_QEMU_SMP: virtual CPUs per VM (default 2: under TCG each is a host thread). */
  smp: number;
  /** SBX_KERNEL: a kernel to boot instead of the guest image's (see kernel-cmdline.ts). */
  kernel?: string;
  /** SBX_INITRD: an initrd to use instead of the image's (with SBX_KERNEL, usually). */
  initrd?: string;
  /** SBX_VM_UID_BASE / SBX_VM_UID_COUNT: the uids (and gids) VMMs run under, one each (vm-user-pool.ts). */
  vmUsers?: VmUserSettings;
  /**
   * SBX_QEMU_BOOT_TIMEOUT_MS: how long a VM may take to be ready. Default: 90 s under TCG,
   * 30 s with KVM. SBX_BOOT_TIMEOUT_MS applies instead when it is longer.
   */
  bootTimeoutMs?: number;
  /** SBX_TRANSPORT: anything but tcp is logged and falls back to TCP (vsock-fallback.ts). */
  transport?: TransportChoice;
}

export function qemuSettingsFromEnv(env: Env): QemuSettings {
  const accel = env.SBX_QEMU_ACCEL || 'auto';
  if (accel !== 'auto' && accel !== 'kvm' && accel !== 'tcg') {
    throw new Error(`SBX_QEMU_ACCEL must be auto, kvm or tcg, got "${accel}"`);
  }
  const smp = envInt('SBX_QEMU_SMP', 2, env);
  if (smp < 1 || smp > 64) throw new Error(`SBX_QEMU_SMP must be between 1 and 64, got ${smp}`);
  const timeout = env.SBX_QEMU_BOOT_TIMEOUT_MS ? envInt('SBX_QEMU_BOOT_TIMEOUT_MS', 0, env) : undefined;
  return {
    binary: envString(env, 'SBX_QEMU_BIN', 'qemu-system-x86_64'),
    imgBinary: envString(env, 'SBX_QEMU_IMG', 'qemu-img'),
    accel,
    smp,
    kernel: envOptional(env, 'SBX_KERNEL'),
    initrd: envOptional(env, 'SBX_INITRD'),
    bootTimeoutMs: timeout,
    vmUsers: vmUserSettingsFromEnv(env),
    transport: transportChoiceFromEnv(env),
  };
}
