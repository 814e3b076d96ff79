import type { SessionRecord } from './session-record.js';

/** A session as the API shows it. */
export interface SessionView {
  id: string;
  state: SessionRecord['state'];
  runtime: SessionRecord['runtime'];
  display: { width: number; height: number };
  timeoutSeconds: number;
  metadata: Record<string, unknown>;
  createdAt: string;
  expiresAt: string;
  error?: string;
}

export function toView(record: SessionRecord): SessionView {
  const view: SessionView = {
    id: record.id,
    state: record.state,
    runtime: record.runtime,
    display: { width: record.width, height: record.height },
    timeoutSeconds: record.timeoutSeconds,
    metadata: record.metadata,
    createdAt: record.createdAt,
    expiresAt: record.expiresAt,
  };
  if (record.error) view.error = record.error;
  return view;
}
