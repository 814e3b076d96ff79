import { spawn } from 'node:child_process';

/**
 * Whether hardware virtualisation really runs a guest here, decided by the test on its own
 * (not by the code under test): a PC machine with KVM and the host's CPU model is started,
 * and over QMP it must say KVM is enabled and be running after `cont`, then quit cleanly.
 * A /dev/kvm that exists but cannot run a vCPU (a nested "kvm-pvm" host aborts with
 * "failed to set MSR") or is missing makes QEMU fail, and so this answer false.
 */
export async function kvmRunsGuests(qemuBinary = 'qemu-system-x86_64'): Promise<{ works: boolean; detail: string }> {
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
