import { envInt, type Env } from '../util/env.js';

/**
 * SBX_MEMORY_MIB (default 1024): the memory of every sandbox, whatever the runtime. Read here
 * once for the session layer (its capacity and the sandbox spec) and for the Firecracker
 * template, which must be made with the memory its sessions will have.
 */
export function sandboxMemoryMiBFromEnv(env: Env): number {
  return envInt('SBX_MEMORY_MIB', 1024, env);
}
