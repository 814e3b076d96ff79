/**
 * Whether this host can run Firecracker microVMs, and if not, exactly what is missing and
 * how to fix it. Every problem is collected, not just the first, so one start-up tells an
 * operator everything to do.
 */
import { accessSync, closeSync, constants, existsSync, openSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { run } from '../../../util/exec.js';
import { commandSearchPath } from '../../../util/inherited-env.js';
import { RuntimeUnavailableError } from '../../runtime.js';
import { hostCgroupVersion, type CgroupVersion } from '../../vm/cgroups.js';
import type { FirecrackerSettings } from '../settings.js';

export interface FirecrackerHost {
  firecrackerBin: string;
  /** Set when VMs are jailed (SBX_FC_JAILER on, or auto with a jailer found). */
  jailerBin?: string;
  /** "v1.16.1", as the binary reports it. */
  version: string;
  cgroupVersion: CgroupVersion;
}

/** The release whose API spec the client's types come from. */
export const SUPPORTED_VERSION = /^v?1\.16\./;

/** Why /dev/kvm cannot be used here, or undefined if it opens for reading and writing. */
export function kvmUnavailable(): string | undefined {
  if (!existsSync('/dev/kvm')) {
    return 'there is no /dev/kvm: load kvm_intel or kvm_amd, enable virtualization in the firmware (or nested virtualization on a cloud VM)';
  }
  try {
    closeSync(openSync('/dev/kvm', 'r+'));
  } catch (err) {
    return `/dev/kvm cannot be opened for reading and writing (${(err as NodeJS.ErrnoException).code}): run as root or add the user to the kvm group`;
  }
  // A /dev/kvm that opens is not yet a KVM Firecracker can use: some nested hosts offer a
  // paravirtual KVM (seen: "kvm-pvm") on CPUs that show no VT-x or AMD-V to the guest.
  const flags = readCpuFlags();
  if (flags && !flags.has('vmx') && !flags.has('svm')) {
    return '/dev/kvm opens, but the CPU shows no hardware virtualization (no vmx or svm flag in /proc/cpuinfo): on a cloud VM, enable nested virtualization';
  }
  return undefined;
}

function readCpuFlags(): Set<string> | undefined {
  try {
    const line = /^flags\s*:(.*)$/m.exec(readFileSync('/proc/cpuinfo', 'utf8'))?.[1];
    return line ? new Set(line.trim().split(/\s+/)) : undefined;
  } catch {
    return undefined;
  }
}

/** An executable on PATH, or undefined. */
export function findOnPath(command: string, searchPath = commandSearchPath()): string | undefined {
  for (const dir of searchPath.split(':')) {
    if (!dir) continue;
    const candidate = path.join(dir, command);
    if (isExecutable(candidate)) return candidate;
  }
  return undefined;
}

function isExecutable(file: string): boolean {
  try {
    accessSync(file, constants.X_OK);
    return true;
  } catch {
    return false;
  }
}

/** The binary from its variable, or from PATH; undefined (with the reason) if neither has one. */
function locate(explicit: string | undefined, variable: string, command: string): { bin?: string; problem?: string } {
  if (explicit) {
    if (!path.isAbsolute(explicit)) return { problem: `${variable}=${explicit} must be an absolute path` };
    return isExecutable(explicit) ? { bin: explicit } : { problem: `${variable}=${explicit} is not an executable file` };
  }
  const bin = findOnPath(command);
  return bin
    ? { bin }
    : { problem: `no ${command} binary: set ${variable} to the static ${command} of Firecracker v1.16.x (from its GitHub release) or put it on PATH` };
}

/**
 * Firecracker never runs unjailed by accident: without a jailer it runs as root, outside
 * any chroot or cgroup, sharing the host's pid namespace. Only SBX_FC_JAILER=off allows it.
 */
export function unjailedRefusal(why = 'no jailer binary was given'): string {
  return `${why}; Firecracker refuses to run unjailed (as root, with no chroot, cgroup or pid namespace of its own): install the jailer of the same release and set JAILER_BIN (or put it on PATH), or set SBX_FC_JAILER=off on a development host`;
}

export async function checkFirecrackerHost(settings: FirecrackerSettings): Promise<FirecrackerHost> {
  const problems: string[] = [];
  const kvm = kvmUnavailable();
  if (kvm) problems.push(kvm);
  if (process.getuid?.() !== 0) problems.push('it needs root (network namespaces, TAP devices, the jailer): run the orchestrator as root');
  if (!existsSync('/dev/net/tun')) problems.push('there is no /dev/net/tun (TAP devices): load the tun module (`modprobe tun`)');

  const firecracker = locate(settings.firecrackerBin, 'FIRECRACKER_BIN', 'firecracker');
  if (firecracker.problem) problems.push(firecracker.problem);
  let jailerBin: string | undefined;
  if (settings.jailer !== 'off') {
    const jailer = locate(settings.jailerBin, 'JAILER_BIN', 'jailer');
    if (jailer.bin) jailerBin = jailer.bin;
    else problems.push(unjailedRefusal(jailer.problem));
  }
  if (jailerBin) {
    if (firecracker.bin && !path.basename(firecracker.bin).includes('firecracker')) {
      problems.push(`the jailer only runs a binary whose file name contains "firecracker"; rename ${firecracker.bin}`);
    }
    if (!path.isAbsolute(settings.chrootBaseDir)) problems.push(`SBX_FC_CHROOT_DIR must be an absolute path, got ${settings.chrootBaseDir}`);
  }

  let version = '';
  if (firecracker.bin) {
    const res = await run([firecracker.bin, '--version'], { allowFailure: true }).catch((err: Error) => ({ exitCode: -1, stdout: '', stderr: err.message }));
    version = /v?\d+\.\d+\.\d+/.exec(res.stdout)?.[0] ?? '';
    if (res.exitCode !== 0 || !version) {
      problems.push(`${firecracker.bin} --version failed or printed no version (${(res.stderr || res.stdout).trim().slice(0, 200)})`);
    } else if (!SUPPORTED_VERSION.test(version)) {
      problems.push(`${firecracker.bin} is ${version}; this build speaks the API of v1.16.x: install firecracker and jailer v1.16.x`);
    }
  }
  if (problems.length > 0) throw new RuntimeUnavailableError('firecracker', problems.join('; '));
  return { firecrackerBin: firecracker.bin as string, jailerBin, version, cgroupVersion: hostCgroupVersion() };
}
