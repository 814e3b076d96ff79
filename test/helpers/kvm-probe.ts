import { spawn } from 'node:child_process';
import { existsSync, readdirSync } from 'node:fs';
import path from 'node:path';
import { IMAGES_DIR } from './template-cli.js';

/**
 * Whether hardware virtualisation really runs a guest here, decided by the test on its own
 * (not by the code under test): a PC machine with KVM and the host's CPU model is started,
 * and over QMP it must say KVM is enabled and be running after `cont`, then quit cleanly;
 * then a guest kernel must boot.
 * A /dev/kvm that exists but cannot run a vCPU (a nested "kvm-pvm" host aborts with
 * "failed to set MSR") or is missing makes QEMU fail, and so this answer false.
 */
export async function kvmRunsGuests(qemuBinary = 'qemu-system-x86_64'): Promise<{ works: boolean; detail: string }> {
  const vcpu = await kvmRunsVcpu(qemuBinary);
  if (!vcpu.works) return vcpu;
  // A vCPU that runs is not yet a guest that boots: on a nested kvm-pvm host a guest kernel
  // stops at its first emulated instructions and spins. A kernel of ours, with no root to
  // mount, panics and (panic=-1, -no-reboot) ends QEMU within a second or two on real KVM.
  const kernel = guestKernel();
  if (!kernel) return vcpu;
  return new Promise((resolve) => {
    const argv = ['-machine', 'microvm,pit=on,pic=on,rtc=on', '-accel', 'kvm', '-cpu', 'host', '-m', '256', '-nodefaults', '-no-user-config'];
    argv.push('-display', 'none', '-no-reboot', '-kernel', kernel, '-append', 'console=ttyS0 panic=-1 reboot=k', '-serial', 'stdio');
    const child = spawn(qemuBinary, argv, { stdio: ['ignore', 'pipe', 'pipe'], timeout: 10_000, killSignal: 'SIGKILL' });
    let console = '';
    child.stdout.on('data', (chunk: Buffer) => (console = (console + chunk.toString('utf8')).slice(-65536)));
    child.stderr.resume();
    child.on('error', (err) => resolve({ works: false, detail: `${qemuBinary}: ${err.message}` }));
    child.on('close', (code, signal) => {
      const works = code === 0 && console.includes('Kernel panic');
      resolve({
        works,
        detail: works ? 'a KVM guest kernel booted to its panic' : `a KVM guest kernel did not boot to its panic in 10 s (exit ${code ?? signal})`,
      });
    });
  });
}

/** A guest kernel of a built image, if one is built. */
function guestKernel(): string | undefined {
  if (!existsSync(IMAGES_DIR)) return undefined;
  for (const name of readdirSync(IMAGES_DIR)) {
    const kernel = path.join(IMAGES_DIR, name, 'vmlinuz');
    if (existsSync(kernel)) return kernel;
  }
  return undefined;
}

/** A PC machine with KVM and the host's CPU model, told to run over QMP. */
function kvmRunsVcpu(qemuBinary: string): Promise<{ works: boolean; detail: string }> {
  const argv = ['-machine', 'pc', '-accel', 'kvm', '-cpu', 'host', '-m', '32', '-nodefaults', '-no-user-config', '-display', 'none', '-S', '-qmp', 'stdio'];
  return new Promise((resolve) => {
    const child = spawn(qemuBinary, argv, { stdio: ['pipe', 'pipe', 'pipe'], timeout: 15_000, killSignal: 'SIGKILL' });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (chunk: Buffer) => (stdout += chunk.toString('utf8')));
    child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString('utf8')));
    child.on('error', (err) => resolve({ works: false, detail: `${qemuBinary}: ${err.message}` }));
    child.on('close', (code, signal) => {
      const replies = stdout
        .split('\n')
        .filter((l) => l.startsWith('{'))
        .map((l) => JSON.parse(l) as { return?: { enabled?: boolean; present?: boolean; status?: string } });
      const kvmEnabled = replies.some((r) => r.return?.enabled === true && r.return.present === true);
      const running = replies.some((r) => r.return?.status === 'running');
      const works = code === 0 && kvmEnabled && running;
      resolve({
        works,
        detail: works ? 'a KVM guest ran' : `exit ${code ?? signal}, kvm enabled ${kvmEnabled}, running ${running}: ${stderr.trim().split('\n')[0] ?? ''}`,
      });
    });
    child.stdin.on('error', () => undefined); // QEMU may die before reading
    child.stdin.end(['qmp_capabilities', 'query-kvm', 'cont', 'query-status', 'quit'].map((c) => JSON.stringify({ execute: c })).join('\n') + '\n');
  });
}
