import { FirecrackerRuntime } from '../runtimes/firecracker/firecracker-runtime.js';
import { kvmUnavailable } from '../runtimes/firecracker/host/host-check.js';
import type { FirecrackerSettings } from '../runtimes/firecracker/settings.js';
import type { ResourceNames } from '../network/names.js';
import type { RuntimeSelection } from '../runtimes/registry.js';
import { hostCgroupVersion } from '../runtimes/vm/cgroups.js';
import { run } from '../util/exec.js';

/** What the bench prints beside every figure of the stand-in. */
export const STAND_IN_LABEL = "stand-in: the host's own steps, not a KVM figure";

/**
 * The Firecracker runtime against its contract stand-in (test/helpers/firecracker/bin: the
 * `firecracker` emulator and the `jailer` stand-in, as the tests run it) on a host without
 * KVM, where the runtime itself refuses to start. Only when FIRECRACKER_BIN says it is the
 * emulator (`--version`: "(contract emulator)"); anything else is left to the runtime's own
 * checks. With FAKE_FIRECRACKER_GUEST=qemu in the environment the emulator boots and restores
 * its guest under QEMU (TCG): the figures are the host's own steps (jail, jailer, API calls,
 * the key rotation's SSH round trips, the session's readiness) around a stand-in's VMM start
 * (a Node.js process) and a QEMU that loads a migration stream, not a KVM restore.
 *
 * The snapshot base is built in `snapshotBaseDir` (the bench's own state dir), not next to
 * the shared image: a stand-in's base holds a QEMU migration stream, no Firecracker snapshot.
 */
export async function firecrackerStandIn(names: ResourceNames, settings: FirecrackerSettings, snapshotBaseDir: string): Promise<RuntimeSelection | undefined> {
  const noKvm = kvmUnavailable();
  const bin = settings.firecrackerBin;
  if (!noKvm || !bin) return undefined;
  const version = await run([bin, '--version'], { allowFailure: true, timeoutMs: 30_000 }).catch(() => undefined);
  if (!version || version.exitCode !== 0 || !version.stdout.includes('contract emulator')) return undefined;
  const runtime = FirecrackerRuntime.forHost(names, settings, {
    firecrackerBin: bin,
    jailerBin: settings.jailer === 'off' ? undefined : settings.jailerBin,
    version: /v\d+\.\d+\.\d+/.exec(version.stdout)?.[0] ?? 'v1.16.1',
    cgroupVersion: hostCgroupVersion(),
  });
  // Found by the image's hash, as a base next to the image would be (firecracker-runtime.ts).
  const prepare = runtime.prepare.bind(runtime);
  runtime.prepare = (image, guest, log) => prepare({ ...image, dir: snapshotBaseDir }, guest, log);
  return { runtime, reason: `${STAND_IN_LABEL} (no KVM here, and FIRECRACKER_BIN is the contract emulator)` };
}
