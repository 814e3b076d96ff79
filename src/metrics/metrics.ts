import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client';

/** Buckets from 1 ms to 10 s: actions live in the low milliseconds, boots in seconds. */
const LATENCY_BUCKETS = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10];

/**
 * The orchestrator's Prometheus metrics. One registry per orchestrator instance (not the
 * global one), so that tests can run several side by side.
 */
export class Metrics {
  readonly registry = new Registry();

  /** The early warning for the cost of SSH: the hot path of every agent loop. */
  readonly screenshotDuration = new Histogram({
    name: 'sandbox_screenshot_duration_seconds',
    help: 'Time to capture a screenshot of a sandbox, from request to encoded image bytes on the host',
    buckets: LATENCY_BUCKETS,
    registers: [this.registry],
  });

  readonly actionDuration = new Histogram({
    name: 'sandbox_action_duration_seconds',
    help: 'Time to perform one computer-use action, by action type',
    labelNames: ['action'] as const,
    buckets: LATENCY_BUCKETS,
    registers: [this.registry],
  });

  readonly createDuration = new Histogram({
    name: 'sandbox_session_create_duration_seconds',
    help: 'Time from a create request to a ready sandbox (SSH up, display answering)',
    labelNames: ['runtime'] as const,
    buckets: [0.1, 0.25, 0.5, 1, 1.5, 2, 3, 5, 10, 20, 30, 60],
    registers: [this.registry],
  });

  /**
   * Boot-to-ready of VM sandboxes, by how the VM ran: KVM boots in about a second, TCG
   * (software emulation, where there is no KVM) in 10-15 s, so they are told apart.
   */
  readonly pauseDuration = new Histogram({
    name: 'sandbox_pause_duration_seconds',
    help: 'Time to pause a session (step pause: detach and freeze) or resume it (step resume: thaw and attach a new connection), by mode',
    labelNames: ['mode', 'step'] as const,
    buckets: [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10],
    registers: [this.registry],
  });
  readonly vmBootDuration = new Histogram({
    name: 'sandbox_vm_boot_seconds',
    help: 'Time from a create request to a ready VM sandbox, by runtime and accelerator (kvm, tcg)',
    labelNames: ['runtime', 'accel'] as const,
    buckets: [0.5, 1, 2, 3, 5, 7.5, 10, 15, 20, 30, 45, 60, 90],
    registers: [this.registry],
  });

  readonly recordingsActive = new Gauge({
    name: 'sandbox_recordings_active',
    help: 'Session recordings in progress (one ffmpeg each)',
    registers: [this.registry],
  });

  readonly recordingBytes = new Counter({
    name: 'sandbox_recording_bytes_total',
    help: 'Bytes of video written by session recordings',
    registers: [this.registry],
  });

  readonly activeSessions = new Gauge({
    name: 'sandbox_sessions_active',
    help: 'Sessions that hold resources (creating, ready or destroying)',
    registers: [this.registry],
  });

  /** What the sessions' networks are, read when scraped (see observeSessionNetworks). */
  private sessionNetworks: () => ReadonlyArray<{ transport: string; interfaces: readonly string[] }> = () => [];

  readonly sessionsByTransport = new Gauge({
    name: 'sandbox_sessions_by_transport',
    help: 'Live sessions by what carries their control channel (tcp, unix, ...) and whether they have a network interface (nic=false: a socket alone, no veth, no address)',
    labelNames: ['transport', 'nic'] as const,
    registers: [this.registry],
    collect: () => {
      this.sessionsByTransport.reset();
      for (const network of this.sessionNetworks()) {
        this.sessionsByTransport.inc({ transport: network.transport, nic: String(network.interfaces.some((name) => name !== 'lo')) });
      }
    },
  });

  /** Where sessionsByTransport reads the live sessions' networks from (the orchestrator sets it). */
  observeSessionNetworks(source: () => ReadonlyArray<{ transport: string; interfaces: readonly string[] }>): void {
    this.sessionNetworks = source;
  }

  /** Where each ready session came from: the warm pool, or a boot on demand. */
  readonly createsTotal = new Counter({
    name: 'sandbox_session_creates_total',
    help: 'Sessions made ready, by source: warm (claimed from the warm pool) or cold (booted on demand)',
    labelNames: ['source'] as const,
    registers: [this.registry],
  });

  readonly warmPoolSandboxes = new Gauge({
    name: 'sandbox_warm_pool_sandboxes',
    help: 'Sandboxes in the warm pool, by state (ready to be claimed, or booting to refill it) and template',
    labelNames: ['state', 'template'] as const,
    registers: [this.registry],
  });

  readonly warmPoolRefillFailures = new Counter({
    name: 'sandbox_warm_pool_refill_failures_total',
    help: 'Warm pool refills that failed to boot a sandbox (each is retried with backoff)',
    registers: [this.registry],
  });

  readonly sessionsTotal = new Counter({
    name: 'sandbox_sessions_total',
    help: 'Sessions by how they ended up: ready, failed (creation or later), destroyed',
    labelNames: ['outcome'] as const,
    registers: [this.registry],
  });

  readonly sshReconnects = new Counter({
    name: 'sandbox_ssh_reconnects_total',
    help: 'Times a session SSH connection dropped and was re-established',
    registers: [this.registry],
  });

  /**
   * A session's SSH connection dropped and could not be re-established (sshd gone, a guest
   * that accepts and never answers, a host key other than the pinned one): its session failed.
   */
  readonly sshConnectionsLost = new Counter({
    name: 'sandbox_ssh_connections_lost_total',
    help: 'Session SSH connections given up (the session failed), by reason: unreachable, host_key_mismatch, authentication',
    labelNames: ['reason'] as const,
    registers: [this.registry],
  });

  readonly networkPolicyRepairs = new Counter({
    name: 'sandbox_network_policy_repairs_total',
    help: 'Times the guest network policy (nftables table) was found changed or removed and put back',
    registers: [this.registry],
  });

  /**
   * A session directory left on disk because something was still mounted in it (a busy
   * image view): never removed through a mount (host/remove-tree.ts); logged at error with
   * what is mounted, retried at the next start.
   */
  readonly sessionDirsKept = new Counter({
    name: 'sandbox_session_dirs_kept_total',
    help: 'Session directories left on disk because something was still mounted in them (logged at error; retried at the next start)',
    registers: [this.registry],
  });

  readonly errors = new Counter({
    name: 'sandbox_errors_total',
    help: 'Errors by where they happened: create, action, screenshot, destroy, ssh, warm_claim',
    labelNames: ['kind'] as const,
    registers: [this.registry],
  });

  /** Requests a tenant sent over its limits (api/tenant-request-limits.ts). No tenant label: /metrics is host-wide. */
  readonly requestsRefused = new Counter({
    name: 'sandbox_api_requests_refused_total',
    help: 'API requests refused with 429 because their tenant was over a limit: concurrency or rate (requests), streams, viewers, runs or run_budget',
    labelNames: ['limit'] as const,
    registers: [this.registry],
  });

  /**
   * A guest broke a protocol and the channel was closed: a frame that does not fit the
   * screen, a helper's stderr or a command's output past its cap, an end marker that never
   * ends. Each is the guest's doing (or a helper replaced in it); only that channel fails.
   */
  readonly guestProtocolErrors = new Counter({
    name: 'sandbox_guest_protocol_errors_total',
    help: 'Guest channels closed because the guest broke their protocol, by channel (capture, input, desktop, bash, exec) and reason',
    labelNames: ['channel', 'reason'] as const,
    registers: [this.registry],
  });

  /** Calls stored as trajectory steps, or counted only past a cap (sessions/trajectory/). */
  readonly trajectorySteps = new Counter({
    name: 'sandbox_trajectory_steps_total',
    help: 'Calls recorded in trajectories: stored, dropped (a step cap), or screenshot_dropped (a byte cap; the step was stored)',
    labelNames: ['outcome'] as const,
    registers: [this.registry],
  });

  readonly trajectoryBytes = new Gauge({
    name: 'sandbox_trajectory_bytes',
    help: 'Bytes all kept trajectories hold, steps and screenshot files (under SBX_TRAJECTORY_MAX_TOTAL_BYTES)',
    registers: [this.registry],
  });

  /** The bash tool's shells: output read from the guest but not kept (past a command's 30,000 characters, or a background job's). */
  readonly bashOutputDroppedBytes = new Counter({
    name: 'sandbox_bash_output_dropped_bytes_total',
    help: "Bytes of bash tool output read from guests and dropped, by phase (command: past the kept output; between_commands: a background job's)",
    labelNames: ['phase'] as const,
    registers: [this.registry],
  });

  /** Time the bash tool's shells were not read: their output budget spent (rate), or a background job's output past its cap (unread_cap). */
  readonly bashOutputThrottledSeconds = new Counter({
    name: 'sandbox_bash_output_throttled_seconds_total',
    help: 'Seconds bash tool shells were not read, so that SSH flow control held their output in the guest, by reason (rate, unread_cap)',
    labelNames: ['reason'] as const,
    registers: [this.registry],
  });

  readonly liveViewers = new Gauge({
    name: 'sandbox_live_viewers',
    help: 'Browsers connected to live views now',
    registers: [this.registry],
  });

  readonly liveViewBytes = new Counter({
    name: 'sandbox_live_view_bytes_total',
    help: 'Bytes through the live-view proxy, by direction (to_viewer: from the guest VNC server; to_guest: from browsers, after filtering)',
    labelNames: ['direction'] as const,
    registers: [this.registry],
  });

  constructor() {
    collectDefaultMetrics({ register: this.registry, prefix: 'sandbox_orchestrator_' });
  }
}
