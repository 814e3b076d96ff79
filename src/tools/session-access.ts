import type { GuestTransport } from '../transport/index.js';
import type { CleanupStack } from '../util/cleanup-stack.js';

/** What a companion tool's per-session state is made with (see SessionAccess.attachment). */
export interface AttachmentContext {
  connection: GuestTransport;
  cleanup: CleanupStack;
}

/**
 * All the companion tools (and the file routes) need of a session: its connection and a
 * place to keep their own per-session state. The session layer implements it; the tools
 * depend on this narrow interface, never on the session manager (tools sit below sessions).
 */
export interface SessionAccess {
  /** A ready session's SSH connection. Counts as activity; throws 404/409/410 otherwise. */
  connection(id: string): GuestTransport;
  /**
   * Per-session state of a tool (e.g. a persistent shell), made on first use. What `create`
   * pushes onto the cleanup stack is released when the session ends, before its SSH
   * connection closes.
   */
  attachment<T>(id: string, name: string, create: (ctx: AttachmentContext) => Promise<T> | T): Promise<T>;
}
