import type { Logger } from 'pino';
import type { GuestImage } from '../guest/image/builder.js';
import type { ConsoleLogLimits } from './console-log.js';
import type { AddressLease } from '../network/address-pool.js';
import type { NetworkAttachment, SandboxNetwork, TapOwner } from '../network/netns.js';
import type { GuestEndpoint } from '../transport/index.js';
import type { CleanupStack } from '../util/cleanup-stack.js';
import type { RuntimeName, RuntimeResourceKind } from './registered.js';

export type { RuntimeName };

/**
 * Records a resource in the store's ledger before it is taken (a no-op where nothing is
 * stored). Its kind is one its runtime's entry registers with a reclaimer (entry.ts).
 */
export type RecordResource = (kind: RuntimeResourceKind, name: string) => void;

/** What a runtime needs to start one sandbox. The session layer has made all of it already. */
export interface SandboxSpec {
  sessionId: string;
  image: GuestImage;
  /** <stateDir>/<sessionId>: the runtime keeps its own files (bundle, disks, logs) here. */
  sessionDir: string;
  /** The per-session config directory (keys, sandbox.env) the guest must see. */
  configDir: string;
  /** The screen the guest's sandbox.env asks for (a Firecracker snapshot base serves one size). */
  screen?: { width: number; height: number };
  hostname: string;
  network: SandboxNetwork;
  memoryMiB: number;
  pidsLimit: number;
  /**
   * <stateDir>/logs: where a console log is kept when its sandbox fails (the session dir
   * goes with the session). See keepConsoleLog.
   */
  logsDir: string;
  /** How big its console log, and the kept logs, may grow (default DEFAULT_CONSOLE_LOG_LIMITS). */
  consoleLog?: ConsoleLogLimits;
  /** Call before taking each host resource, so that a crash at any point leaves a record of it. */
  record?: RecordResource;
  /**
   * Leases the session's host id range (the first of `size` ids from `base`, aligned to
   * `size`, one of at most `count` ranges), recorded on the ledger; the same range for the
   * same session. See store.ts. A range free in the ledger is taken only if `takeHostWide`
   * gets it too (id-leases.ts).
   */
  leaseIdRange?: (base: number, size: number, count: number, takeHostWide: (first: number) => boolean) => number;
  /** The uid/gid leased for this sandbox's VMM (Runtime.leaseVmUser), which owns its TAP. */
  vmUser?: TapOwner;
  /** Ends a named step of the start (the bench prints where a create's time goes). */
  step?: (name: string) => void;
  /** Volumes to mount (docs/volumes.md), held for this session (nobody else writes them meanwhile). */
  volumes?: readonly SandboxVolume[];
  /**
   * A fork (docs/snapshots.md): the sandbox starts from this snapshot's saved memory and disk
   * instead of booting, and is given this spec's keys and address before start returns.
   */
  snapshot?: { id: string; dir: string };
}

/** A volume to mount in a sandbox: an ext4 image file of the host, seen at `path` in the guest. */
export interface SandboxVolume {
  name: string;
  /** The volume's image file on the host (volumes/volume-files.ts). */
  file: string;
  path: string;
  readOnly: boolean;
}

/** How a VM is run: with KVM, or in software (TCG, about ten times slower to boot). */
export type Accelerator = 'kvm' | 'tcg';

export interface ExitInfo {
  code: number | null;
  reason: string;
  /** Where the runtime kept the console log of a sandbox that died (see keepConsoleLog). */
  consoleLogKeptAt?: string;
}

/** A started sandbox, as far as the layers above need to know. */
export interface RunningSandbox {
  /** Where the guest's sshd listens. */
  endpoint: GuestEndpoint;
  /**
   * The newest of what the guest printed (capped: see console-log.ts and console-pipe.ts;
   * the older half is in `<consoleLogPath>.1`). Read it with consoleLogTail, never whole.
   */
  consoleLogPath: string;
  /** The host pid of the sandbox's top process (container init or VM process). */
  pid: number;
  /** Settles when the sandbox stops by itself (crash, kill, poweroff). */
  exited: Promise<ExitInfo>;
  isAlive(): boolean;
  /** VM runtimes: how the VM runs (a boot-time metric is labelled with it). */
  accelerator?: Accelerator;
}

/**
 * What a runtime can and needs, as data (containerd's model: a few required methods, the
 * differences between backends said here), so that nothing above the runtime asks which one
 * it is.
 */
export interface RuntimeCapabilities {
  /**
   * How the sandbox joins its network namespace. 'veth': the netns end of the veth is the
   * guest's eth0. 'tap' (VMs): a TAP bridged with the veth end. See netns.ts.
   */
  readonly networkAttachment: NetworkAttachment;
  /**
   * True when the guest configures its own eth0 from sandbox.env (a VM's kernel sees a bare
   * NIC); false when the host has configured it already (a container's netns end of the veth).
   */
  readonly guestConfiguresNetwork: boolean;
  /**
   * True when the guest sees the host's config directory itself (a bind mount of the
   * directory), so that a file renamed into it on the host is what the guest reads next:
   * the warm pool hands a sandbox to a new client key this way. A config drive (VMs) is
   * copied at boot, so it is not live.
   */
  readonly configDirIsLive: boolean;
  /**
   * The boot timeout this runtime needs (0: none of its own). A VM under TCG takes many times
   * a container's start-up: the longer of this and SBX_BOOT_TIMEOUT_MS applies.
   */
  readonly bootTimeoutMs: number;
  /**
   * Source addresses the network policy lets through to the host from any sandbox veth, on
   * top of each sandbox's own lease (anti-spoofing): the Firecracker snapshot base address that
   * a snapshot clone answers from while the host rotates its keys.
   */
  readonly hostOnlySources: readonly string[];
  /**
   * True when the guest runs on the host's own kernel (containers): the kernel is then the
   * isolation boundary, which the start-up log warns about when keys are handed out.
   */
  readonly sharesHostKernel: boolean;
  /**
   * What can carry the SSH control channel to its sandboxes (default 'tcp': the guest's
   * address over its NIC). 'unix' (a container's socket) or 'vsock' (Firecracker's hybrid
   * vsock): a sandbox started without a NIC (network attachment 'none', given to sessions
   * without egress) is reached over a socket on the host (RunningSandbox.endpoint says
   * where), so it needs no network interface at all.
   */
  readonly controlTransport?: 'tcp' | 'unix' | 'vsock';
  /**
   * Whether its sandboxes can mount volumes (SandboxSpec.volumes): true, or why not (a create
   * that asks for volumes then answers 409 volumes_unavailable saying so).
   */
  readonly volumes?: true | string;
  /**
   * True when a pause to disk ends the guest's side of the SSH connection (a container's
   * processes are killed once dumped, and their sockets closed): the session lets its
   * connection go first, and attaches a new one on the resume. A VM's stops with it, unsent.
   */
  readonly diskPauseEndsConnection?: boolean;
}

/**
 * One narrow interface per backend (container, qemu, firecracker); nothing above it knows
 * which one runs. `start` pushes a release for every resource it takes onto `cleanup`, so a
 * start that fails half-way, and a later destroy, free exactly what was taken.
 */
export interface Runtime extends PausingRuntime, SnapshottingRuntime {
  /** Recorded with each session and said in logs and /v1/health; never branched on above. */
  readonly name: RuntimeName;
  readonly capabilities: RuntimeCapabilities;
  /** How this runtime runs its sandboxes, one line for the start-up log. */
  describe(): string;
  /**
   * The most a sandbox of `image` can take of the host's disk, MiB: the size of the disk it
   * writes to (sparse, filled as the guest writes). Admission promises it (capacity.ts).
   * `image` is unknown for some adopted sandboxes: a runtime whose disk depends on it says 0.
   */
  writableDiskMiB?(image: GuestImage | undefined): number;
  /**
   * VM runtimes that drop root: a uid/gid of the sandbox's own for its VMM (vm-user-pool.ts),
   * leased before its network is made (the TAP is created owned by it), released by `cleanup`.
   */
  leaseVmUser?(cleanup: CleanupStack, record?: RecordResource): Promise<TapOwner>;
  start(spec: SandboxSpec, cleanup: CleanupStack): Promise<RunningSandbox>;
  /**
   * Work done once per guest image before sessions are served (the Firecracker runtime's
   * snapshot base). A failure only makes sessions slower: it is reported through `log`,
   * never thrown.
   */
  prepare?(image: GuestImage, guest: PreparedGuest, log: (message: string) => void): Promise<void>;
  /**
   * Host-wide settings this runtime needs for up to `sandboxes` sandboxes at once (e.g. the
   * host's inotify limits), applied and logged at start-up. A failure stops the start.
   */
  prepareHost?(sandboxes: number, log: Logger): Promise<void>;
  /** Session ids of the sandboxes this runtime has on the host, alive or not. */
  list(): Promise<string[]>;
  /**
   * A sandbox an earlier run of the orchestrator started, found again alive (after a crash
   * or a restart), or undefined if it is gone. `release` frees what the runtime holds for
   * it, as a destroy would. `endpoint` is the TCP endpoint of its address (undefined when it
   * has none); the runtime reports the endpoint it is really reached at in the sandbox.
   */
  adopt(sessionId: string, sessionDir: string, endpoint: GuestEndpoint | undefined, consoleLog?: ConsoleLogLimits): Promise<AdoptedSandbox | undefined>;
  /** Removes whatever this runtime left of a sandbox it no longer tracks. Idempotent. */
  reclaim(sessionId: string, sessionDir: string): Promise<void>;
}

/**
 * How deep a pause goes (docs/pause.md): `memory` freezes the sandbox in place (the cgroup
 * freezer, the VMM paused): no CPU, its RAM kept; `disk` writes its memory to the host's disk
 * and lets the sandbox's processes go (QEMU: qemu/disk-pause.ts).
 */
export const PAUSE_MODES = ['memory', 'disk'] as const;
export type PauseMode = (typeof PAUSE_MODES)[number];

/** Which sandbox a pause or resume is about (adopted ones too: the runtime finds it by these). */
export interface PauseTarget {
  sessionId: string;
  sessionDir: string;
  /** The host pid of its top process (0: none, paused to disk). */
  pid: number;
  /** Where its sshd is reached (a sandbox resumed from disk is a new process: its RunningSandbox says it again). */
  endpoint?: GuestEndpoint;
  /** Its address lease, if it has a NIC (a restored container's eth0 is configured again from it). */
  lease?: AddressLease;
}

/** A sandbox paused to disk, found again by a restart: its state file, and how to free what it holds. */
export interface PausedOnDisk {
  bytes: number;
  /** When its state was written (ISO 8601). */
  since: string;
  /** Frees what the runtime holds for it (its uid, cgroup, TAP), as a destroy would. */
  release(): Promise<void>;
  /** The VM's own uid and gid, which its TAP must belong to if the network is made again (after a host reboot). */
  vmUser?: { uid: number; gid: number };
}

/** What a pause holds on the host: the bytes of state it wrote to disk (0 for memory). */
export interface PauseResult {
  bytes: number;
}

/**
 * A runtime that can pause its sandboxes (optional methods of Runtime, kept together here).
 * `pauseModes` says which modes it does on this host, and `pauseUnavailable` why a mode it
 * does not do is missing (for the host check and the 409 of a request that asks for it).
 */
export interface PausingRuntime {
  pauseModes?(): readonly PauseMode[];
  pauseUnavailable?(mode: PauseMode): string | undefined;
  /** The most a pause to disk of a sandbox of `memoryMiB` may write to the host, MiB (the pause checks the host has it). */
  pauseStateMaxMiB?(memoryMiB: number): number;
  /**
   * Whether a sandbox with volumes can be paused to disk (absent: not; QEMU cannot yet: it
   * reopens every drive by path when a migration completes, which a volume's file refuses).
   */
  diskPauseWithVolumes?(): boolean;
  /** Pauses a running sandbox; on failure the sandbox is left running. */
  pause?(target: PauseTarget, mode: PauseMode): Promise<PauseResult>;
  /**
   * Lets a paused sandbox run again, where it stopped. From disk its process is a new one: the
   * answer is it, with the release that stops it (the session pushes it on its cleanup stack).
   */
  resume?(target: PauseTarget, mode: PauseMode): Promise<AdoptedSandbox | void>;
  /** Whether the sandbox is paused now (memory mode), asked when a restart adopts it. */
  isPaused?(target: PauseTarget): Promise<boolean>;
  /**
   * A restart: the sandbox's state saved on disk, if a whole one is there (it is then the
   * truth: a process of the sandbox still found is stopped), with what the runtime holds for it.
   */
  adoptPaused?(sessionId: string, sessionDir: string): Promise<PausedOnDisk | undefined>;
}

/**
 * A runtime that can save a running sandbox (memory and disk) for forks (docs/snapshots.md).
 * `snapshotUnavailable` says why it cannot here (the 409 snapshot_unsupported of a request).
 */
export interface SnapshottingRuntime {
  snapshotUnavailable?(): string | undefined;
  /** Saves the sandbox into `dir` (made, empty, root's 0700); the sandbox runs on after a moment's pause. */
  snapshot?(target: PauseTarget, dir: string): Promise<void>;
}

export interface AdoptedSandbox {
  sandbox: RunningSandbox;
  release(): Promise<void>;
}

/** A runtime cannot run on this host; the message says what is missing and how to fix it. */
export class RuntimeUnavailableError extends Error {
  constructor(runtime: string, reason: string) {
    super(`runtime ${runtime} is not available here: ${reason}`);
    this.name = 'RuntimeUnavailableError';
  }
}

/** What a runtime that prepares sandboxes ahead (a Firecracker snapshot base) must give their guests, as sessions get it. */
export interface PreparedGuest {
  /** X display number (SBX_DISPLAY). */
  display: number;
  /** Processes the guest may run (SBX_PIDS_LIMIT). */
  pidsLimit: number;
}
