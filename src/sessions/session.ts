import { randomInt } from 'node:crypto';
import type { ComputerTool } from '../computer/computer-tool.js';
import type { GuestImage } from '../guest/image/image-store.js';
import type { RunningSandbox } from '../runtimes/runtime.js';
import type { GuestTransport } from '../transport/index.js';
import { CleanupStack } from '../util/cleanup-stack.js';
import type { SessionVolumes } from '../volumes/volumes.js';
import { StepTimes } from '../util/step-times.js';
import type { SandboxWatch } from './sandbox-watch.js';
import type { SessionRecord } from './session-record.js';

/** Who holds a session's desktop instead of the agent, and since when. */
export interface ControlHold {
  heldBy: string;
  since: string;
}

const ID_ALPHABET = 'abcdefghijklmnopqrstuvwxyz0123456789';

/** 10 random characters of [a-z0-9] (about 51 bits), short enough for interface names. */
export function newSessionId(): string {
  let id = '';
  for (let i = 0; i < 10; i++) id += ID_ALPHABET[randomInt(ID_ALPHABET.length)];
  return id;
}

/**
 * One live session: its stored record plus everything it holds. The cleanup stack owns every
 * resource taken for it (key dir, address lease, netns, veth, overlay, container, SSH
 * connection); a failed creation and a destroy both simply run it.
 */
export class Session {
  readonly cleanup = new CleanupStack();
  sandbox: RunningSandbox | undefined;
  connection: GuestTransport | undefined;
  computer: ComputerTool | undefined;
  /** The volumes it holds (docs/volumes.md): given back after its sandbox is released. */
  volumes: SessionVolumes | undefined;
  /** The image of its template, resolved at create time; what the runtime boots. */
  image: GuestImage | undefined;
  /** Watches the sandbox's process and network while the session is live (sandbox-watch.ts). */
  watch: SandboxWatch | undefined;
  /** Settles when creation has finished, well or badly. */
  creation: Promise<unknown> | undefined;
  /** Set once resources are being released; later destroys wait for it. */
  release: Promise<void> | undefined;
  /** When expiresAt was last written to the store (it moves on every action). */
  expiryPersistedAt = 0;
  /** Long actions and tool calls running now: while any is, the idle timeout waits. */
  inFlight = 0;
  /** Set while a person holds the desktop through a live view (views/takeover.ts): agent actions answer 409. */
  control: ControlHold | undefined;
  /**
   * A pause or resume under way (pause.ts): requests wait for it (or are refused), and the
   * reaper leaves the session alone. `transitionDone` settles when it is over.
   */
  transition: 'pausing' | 'resuming' | undefined;
  transitionDone: Promise<unknown> | undefined;
  /** A snapshot of it being taken (session-snapshots.ts): one at a time; it counts as in flight meanwhile. */
  snapshotting = false;
  /** A fork: the snapshot its sandbox starts from (docs/snapshots.md), until it has started. */
  fromSnapshot: { id: string; dir: string } | undefined;
  /**
   * Closes the session's connection and desktop (set by attachDesktop): a pause lets them go
   * before the guest freezes, and a resume attaches new ones.
   */
  detach: (() => void) | undefined;
  /**
   * Paused to disk (or pausing to it): its sandbox's process ended on purpose, so its exit is
   * not a crash; a resume gives it a new sandbox (pause.ts).
   */
  processAway = false;
  /** While paused: starts the connection's keepalives again (GuestConnection.holdKeepalives). */
  keepalivesHeld: (() => void) | undefined;
  /** Per-session state of companion tools (e.g. the persistent bash shell), by name. */
  readonly attachments = new Map<string, unknown>();
  /** Where its create's time went, step by step (boot.ts, pool/claim.ts; logged once ready). */
  steps = new StepTimes();

  constructor(public record: SessionRecord) {}

  get id(): string {
    return this.record.id;
  }
}

/** A session whose desktop answers: its connection and computer are there, not optional. */
export type ReadySession = Session & { readonly connection: GuestTransport; readonly computer: ComputerTool };

/** True once creation attached the session's connection and desktop (see boot.ts). */
export function hasDesktop(session: Session): session is ReadySession {
  return session.connection !== undefined && session.computer !== undefined;
}
