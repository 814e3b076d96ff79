import type { startOrchestrator } from '../orchestrator.js';

type OrchestratorConfig = Parameters<typeof startOrchestrator>[0];

/**
 * The bench's orchestrator: the defaults, with the limits that are for clients lifted so that
 * they measure the orchestrator, not its limiter, for `mostSessions` sessions of one tenant.
 */
export function benchConfig(defaults: OrchestratorConfig, mostSessions: number, where: { stateDir: string; subnet: string }): OrchestratorConfig {
  return {
    ...defaults,
    ...where,
    port: 0,
    warmPoolSize: 0,
    // The load runs up to RAMP_MAX sessions for one (keyless, local) tenant at once: the
    // default per-tenant and host limits are for clients, not for the benchmark itself.
    maxSessions: Math.max(defaults.maxSessions, mostSessions),
    maxSessionsPerTenant: Math.max(defaults.maxSessionsPerTenant, mostSessions),
    // Likewise the request limits: the load alone sends sessions x 2 requests every
    // LOAD_INTERVAL_MS (128/s for 16, over the 50/s default), and the sequential phases
    // send as fast as the orchestrator answers. The bench measures the orchestrator, not the limiter.
    tenantRequestsPerSecond: Math.max(defaults.tenantRequestsPerSecond, 10_000),
    tenantRequestBurst: Math.max(defaults.tenantRequestBurst, 10_000),
    tenantMaxConcurrentRequests: Math.max(defaults.tenantMaxConcurrentRequests, mostSessions * 4),
    // Disk admission promises each session its writable disk and its recording and trajectory
    // caps (4.3 GiB by default: the ramp's sessions would need ~300 GB free). The bench's
    // sessions write next to nothing: smaller disks and recordings, so the ramp fits a 60 GB disk.
    runtimes: { ...defaults.runtimes, container: { ...defaults.runtimes.container, diskMiB: Math.min(defaults.runtimes.container.diskMiB, 512) } },
    recording: { ...defaults.recording, maxBytes: Math.min(defaults.recording.maxBytes, 64 * 2 ** 20) },
  };
}
