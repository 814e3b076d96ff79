import { setTimeout as sleep } from 'node:timers/promises';
import type { Logger } from 'pino';
import type { GuestProtocolError } from '../errors.js';
import type { Metrics } from '../metrics/metrics.js';
import type { ConnectionLostError } from '../transport/index.js';
import type { SandboxHost } from './sandbox-host.js';
import type { Session } from './session.js';

/** How long a watch that saw a sandbox's process gone waits for the runtime to report its exit. */
const EXIT_REPORT_GRACE_MS = 2_500;

/** What the watches report to (the lifecycle, which marks the session failed and releases it). */
export interface WatchHooks {
  watch: SandboxHost['watch'];
  metrics: () => Metrics;
  vanished: (session: Session, log: Logger, reason: string, kind?: 'sandbox_exit' | 'ssh') => void;
}

/**
 * A sandbox that dies by itself, or whose network is deleted from under it, is reported
 * within about a second (sandbox-watch.ts); so is its SSH connection lost for good.
 */
export function watchSandbox(session: Session, log: Logger, hooks: WatchHooks): void {
  watchSandboxProcess(session, log, hooks);
  watchConnection(session, log, hooks);
}

/**
 * The session's sandbox of the moment: a pause to disk ends its process on purpose
 * (`processAway`), and the resume watches the new one; the old one's exit says nothing.
 */
export function watchSandboxProcess(session: Session, log: Logger, hooks: WatchHooks): void {
  const { sandbox } = session;
  const current = () => session.sandbox === sandbox && !session.processAway;
  const watch = hooks.watch(session);
  if (sandbox && watch) {
    session.watch = watch;
    void watch.gone.then(async (gone) => {
      // A process that died is the runtime's to describe (its exit status, where its console
      // log was kept): give its `exited` a moment to say so first.
      if (gone.processExited) await Promise.race([sandbox.exited, sleep(EXIT_REPORT_GRACE_MS)]);
      if (current()) hooks.vanished(session, log, `sandbox vanished: ${gone.reason}`);
    });
  }
  if (sandbox)
    void sandbox.exited.then((info) => {
      if (current()) hooks.vanished(session, log, `sandbox stopped unexpectedly: ${info.reason}`);
    });
}

/** The session's SSH connection of the moment (a resume attaches a new one: pause.ts). */
export function watchConnection(session: Session, log: Logger, hooks: WatchHooks): void {
  session.connection?.on('reconnected', () => hooks.metrics().sshReconnects.inc());
  session.connection?.on('lost', (err: ConnectionLostError) => {
    hooks.metrics().sshConnectionsLost.inc({ reason: err.reason });
    // A changed host key is someone in the guest (or on its path) posing as it: an error.
    if (err.reason === 'host_key_mismatch') log.error({ reason: err.reason }, 'the guest presented a host key other than the pinned one: failing the session');
    hooks.vanished(session, log, err.message, 'ssh');
  });
  session.connection?.on('guest_protocol_error', (err: GuestProtocolError) => {
    log.warn({ channel: err.channel, reason: err.reason, detail: err.message }, 'guest broke a protocol; its channel was closed');
    hooks.metrics().guestProtocolErrors.inc({ channel: err.channel, reason: err.reason });
  });
}
