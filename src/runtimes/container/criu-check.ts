import os from 'node:os';
import { run } from '../../util/exec.js';

/**
 * Whether a container could be paused to disk with CRIU on this host, and if not, why (said
 * by the host check and by a 409 to a request for `disk`). Debian 12 ships criu 3.17, which
 * cannot checkpoint on kernels from 6.13 on; where criu is new enough (criuTooOld), `criu
 * check` must pass too. Undefined: it could. Nothing here fakes a checkpoint: the container
 * runtime offers `disk` only once its CRIU path exists.
 */
export async function criuUnavailable(bin = 'criu', kernel = os.release()): Promise<string | undefined> {
  const version = await run([bin, '--version'], { allowFailure: true, timeoutMs: 5_000 }).catch(() => undefined);
  if (!version || version.exitCode !== 0) return 'CRIU is not installed (scripts/setup-criu.sh unpacks one; kernels from 6.16 need criu 4.2 or newer)';
  const found = /Version:\s*(\d+)\.(\d+)/.exec(version.stdout);
  const criu = found ? [Number(found[1]), Number(found[2])] : [0, 0];
  const reason = criuTooOld(criu as [number, number], kernel);
  if (reason) return reason;
  const check = await run([bin, 'check'], { allowFailure: true, timeoutMs: 15_000 }).catch(() => undefined);
  if (!check || check.exitCode !== 0)
    return `\`criu check\` fails on this host: ${(check?.stderr || check?.stdout || 'no output').trim().split('\n').slice(-3).join('; ')}`;
  return undefined;
}

/**
 * The oldest criu that can checkpoint a sandbox on a kernel, by what the kernel changed: from
 * 6.13, criu before 4.1 fails its vDSO check; from 6.16, getsockopt(SO_PASSCRED/SO_PASSSEC)
 * is refused on TCP sockets, and criu 4.1.x cannot dump any (criu issues #2705, #2718), while
 * `criu check` still passes. Tried here (kernel 6.18): Debian trixie's 4.1.1 fails on the
 * guest's sshd socket, sid's 4.2.1 dumps and restores a desktop (docs/pause.md).
 */
const CRIU_NEEDED: ReadonlyArray<{ kernel: [number, number]; criu: [number, number] }> = [
  { kernel: [6, 16], criu: [4, 2] },
  { kernel: [6, 13], criu: [4, 1] },
];

/** criu too old for the kernel: the reason it cannot run; else undefined (pure, unit-tested). */
export function criuTooOld(criu: [number, number], kernel: string): string | undefined {
  const k = /^(\d+)\.(\d+)/.exec(kernel);
  if (!k) return undefined;
  const running: [number, number] = [Number(k[1]), Number(k[2])];
  const needed = CRIU_NEEDED.find((rule) => atLeast(running, rule.kernel));
  if (needed && !atLeast(criu, needed.criu)) {
    const [kMajor, kMinor] = needed.kernel;
    return `criu ${criu.join('.')} cannot run on kernel ${kernel} (kernels from ${kMajor}.${kMinor} need criu ${needed.criu.join('.')} or newer; Debian 12 ships 3.17)`;
  }
  return undefined;
}

function atLeast(version: [number, number], floor: [number, number]): boolean {
  return version[0] > floor[0] || (version[0] === floor[0] && version[1] >= floor[1]);
}
