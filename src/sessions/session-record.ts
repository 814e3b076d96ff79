import type { RuntimeName } from '../runtimes/runtime.js';

export const SESSION_STATES = ['creating', 'ready', 'destroying', 'destroyed', 'failed'] as const;
export type SessionState = (typeof SESSION_STATES)[number];

/** What is stored about a session, and what the API shows of it. */
export interface SessionRecord {
  id: string;
  state: SessionState;
  runtime: RuntimeName;
  width: number;
  height: number;
  timeoutSeconds: number;
  metadata: Record<string, unknown>;
  createdAt: string;
  updatedAt: string;
  expiresAt: string;
  /** The /30 block leased to it; null once released. */
  addressIndex: number | null;
  /** Why it failed, when it did. */
  error: string | null;
}
