import type { FirecrackerClient } from '../api/client.js';

/**
 * One named step of talking a Firecracker process into a running VM (after
 * firecracker-go-sdk's handler lists: `CreateMachine`, `CreateBootSource`, `AttachDrives`, ...).
 * A sequence is a plain array, so a caller can log it, drop a step or insert one, and a
 * failure names the step it happened in.
 */
export interface VmStep {
  readonly name: string;
  run(client: FirecrackerClient): Promise<void>;
}

/** A step failed; `step` names it, `cause` is what failed (often a FirecrackerApiError). */
export class VmStepError extends Error {
  constructor(
    readonly step: string,
    cause: unknown,
  ) {
    super(`firecracker step "${step}" failed: ${cause instanceof Error ? cause.message : String(cause)}`, { cause });
    this.name = 'VmStepError';
  }
}

/**
 * Runs the steps in order, each after the previous one has been answered: Firecracker
 * applies configuration calls one at a time and in order, and a later call may depend on
 * an earlier one (InstanceStart needs everything before it).
 */
export async function runSteps(steps: readonly VmStep[], client: FirecrackerClient): Promise<void> {
  for (const step of steps) {
    try {
      await step.run(client);
    } catch (err) {
      throw new VmStepError(step.name, err);
    }
  }
}
