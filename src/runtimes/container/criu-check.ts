import os from 'node:os';
import { run } from '../../util/exec.js';

/**
 * Whether a container could be paused to disk with CRIU on this host, and if not, why (said
 * by the host check and by a 409 to a request for `disk`). Debian 12 ships criu 3.17, which
 * cannot checkpoint on kernels from 6.13 on (it needs criu 4.1 or newer there); where criu
 * is new enough, `criu check` must pass too. Undefined: it could. Nothing here fakes a
 * checkpoint: the container runtime offers `disk` only once its CRIU path exists.
 */
export async function criuUnavailable(bin = 'criu', kernel = os.release()): Promise<string | undefined> {
  const version = await run([bin, '--version'], { allowFailure: true, timeoutMs: 5_000 }).catch(() => undefined);
  if (!version || version.exitCode !== 0) return 'CRIU is not installed (apt-get install criu; kernels from 6.13 need criu 4.1 or newer)';
  const found = /Version:\s*(\d+)\.(\d+)/.exec(version.stdout);
  const criu = found ? [Number(found[1]), Number(found[2])] : [0, 0];
  const reason = criuTooOld(criu as [number, number], kernel);
  if (reason) return reason;
  const check = await run([bin, 'check'], { allowFailure: true, timeoutMs: 15_000 }).catch(() => undefined);
  if (!check || check.exitCode !== 0)
    return `\`criu check\` fails on this host: ${(check?.stderr || check?.stdout || 'no output').trim().split('\n').slice(-3).join('; ')}`;
  return undefined;
}

/** criu before 4.1 on a kernel from 6.13: the reason it cannot run; else undefined (pure, unit-tested). */
export function criuTooOld(criu: [number, number], kernel: string): string | undefined {
  const k = /^(\d+)\.(\d+)/.exec(kernel);
  const kernelAtLeast613 = k !== null && (Number(k[1]) > 6 || (Number(k[1]) === 6 && Number(k[2]) >= 13));
  const criuAtLeast41 = criu[0] > 4 || (criu[0] === 4 && criu[1] >= 1);
  if (kernelAtLeast613 && !criuAtLeast41) {
    return `criu ${criu.join('.')} cannot run on kernel ${kernel} (kernels from 6.13 need criu 4.1 or newer; Debian 12 ships 3.17)`;
  }
  return undefined;
}
