/**
 * KVM or TCG: whether QEMU can run VMs with hardware virtualisation here, and what a TCG
 * guest needs to boot reliably.
 */
import { spawn } from 'node:child_process';
import { constants, existsSync } from 'node:fs';
import { access, readFile } from 'node:fs/promises';
import { run } from '../../util/exec.js';
import type { Accelerator } from '../runtime.js';

export interface KvmProbe {
  usable: boolean;
  /** Why not (or "KVM works"), for the start-up log. */
  reason: string;
}

/**
 * kvm-pvm, the KVM of some nested hosts: QEMU starts on it, and a paused VM passes the probe
 * below, but a guest kernel stops at its first instructions that need emulating (the host's
 * log says "kvm-pvm: INTERNAL_ERROR in batch emul") and spins a core. Seen on these machines
 * with kernel 6.18; on older ones the vCPU's setup failed ("failed to set MSR 0x10a").
 */
const PVM_MODULE = '/sys/module/kvm_pvm';

interface PvmCheck {
  /** SBX_QEMU_ACCEL=kvm: the operator's word, kvm-pvm or not. */
  forced?: boolean;
  /** Where the module shows (tests). */
  pvmModule?: string;
}

/**
 * Whether QEMU can really use KVM here. /dev/kvm existing is not enough: on some hosts it
 * exists but cannot run an ordinary guest (seen on these machines: a nested "kvm-pvm"
 * host, where QEMU aborts setting up the vCPU with "failed to set MSR 0x10a"). So QEMU is
 * started for real with the accelerator and CPU model the runtime would use, paused (-S),
 * and asked to quit over QMP on its stdin; only a clean exit counts.
 */
export async function probeKvm(qemuBinary: string, timeoutMs = 10_000, opts: PvmCheck = {}): Promise<KvmProbe> {
  if (!opts.forced && existsSync(opts.pvmModule ?? PVM_MODULE)) {
    return {
      usable: false,
      reason: '/dev/kvm is kvm-pvm\'s (a nested host\'s KVM), on which a guest kernel hangs ("INTERNAL_ERROR in batch emul"); SBX_QEMU_ACCEL=kvm forces it',
    };
  }
  try {
    await access('/dev/kvm', constants.R_OK | constants.W_OK);
  } catch {
    return { usable: false, reason: '/dev/kvm is missing or not accessible' };
  }
  const argv = [
    '-machine',
    'microvm',
    '-accel',
    'kvm',
    '-cpu',
    cpuModel('kvm'),
    '-m',
    '64',
    '-nodefaults',
    '-no-user-config',
    '-display',
    'none',
    '-S',
    '-qmp',
    'stdio',
  ];
  return new Promise<KvmProbe>((resolve) => {
    const child = spawn(qemuBinary, argv, { stdio: ['pipe', 'pipe', 'pipe'], timeout: timeoutMs, killSignal: 'SIGKILL' });
    let stderr = '';
    child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString('utf8')));
    child.stdout.resume();
    child.on('error', (err) => resolve({ usable: false, reason: `${qemuBinary} could not be run: ${err.message}` }));
    child.on('close', (code, signal) => {
      if (code === 0) return resolve({ usable: true, reason: 'KVM works' });
      const detail = stderr.trim().split('\n').filter(Boolean).slice(0, 2).join(' / ') || (signal ? `killed by ${signal}` : `exit ${code}`);
      resolve({ usable: false, reason: `/dev/kvm is present but QEMU cannot use it (${detail})` });
    });
    child.stdin.on('error', () => undefined); // QEMU may exit before reading: not our error
    child.stdin.end('{"execute":"qmp_capabilities"}\n{"execute":"quit"}\n');
  });
}

/**
 * The CPU model: the host's own with KVM; under TCG "max", every feature QEMU can emulate.
 */
export function cpuModel(accelerator: Accelerator): string {
  return accelerator === 'kvm' ? 'host' : 'max';
}

/**
 * The host's TSC frequency in kHz, for the guest's `tsc_early_khz=` under TCG.
 *
 * Why: under TCG the guest's TSC runs at the host's TSC rate, but the guest kernel measures
 * that rate against the emulated PIT, and on a busy host that measurement fails now and
 * then ("tsc: Unable to calibrate against PIT ... Marking TSC unstable"); the guest then
 * hangs before its init runs. Seen here in about one boot in three with two test suites
 * running; with the frequency given, never. With KVM the guest uses kvm-clock instead.
 *
 * Sources, most exact first: the kernel's own calibration in its log, then /proc/cpuinfo
 * on CPUs with a constant TSC. Undefined if neither says (the guest then calibrates).
 */
export async function hostTscKhz(): Promise<number | undefined> {
  const log = await run(['dmesg'], { allowFailure: true, timeoutMs: 5_000 }).catch(() => undefined);
  const fromLog = tscKhzFromKernelLog(log?.stdout ?? '');
  if (fromLog) return fromLog;
  const cpuinfo = await readFile('/proc/cpuinfo', 'utf8').catch(() => '');
  return tscKhzFromCpuinfo(cpuinfo);
}

/** "tsc: Refined TSC clocksource calibration: 2445.432 MHz" beats "tsc: Detected 2445.428 MHz processor". */
export function tscKhzFromKernelLog(log: string): number | undefined {
  const refined = /tsc: Refined TSC clocksource calibration: (\d+\.\d+) MHz/.exec(log);
  const detected = /tsc: Detected (\d+\.\d+) MHz (?:processor|TSC)/.exec(log);
  const mhz = refined?.[1] ?? detected?.[1];
  return mhz ? Math.round(Number(mhz) * 1000) : undefined;
}

/** "cpu MHz" is the TSC rate only when the TSC is constant (and not stopped in idle states). */
export function tscKhzFromCpuinfo(cpuinfo: string): number | undefined {
  const flags = /^flags\s*:(.*)$/m.exec(cpuinfo)?.[1]?.split(/\s+/) ?? [];
  if (!flags.includes('constant_tsc') || !flags.includes('nonstop_tsc')) return undefined;
  const mhz = /^cpu MHz\s*:\s*(\d+(?:\.\d+)?)$/m.exec(cpuinfo)?.[1];
  return mhz ? Math.round(Number(mhz) * 1000) : undefined;
}
