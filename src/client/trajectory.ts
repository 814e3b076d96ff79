import type { SandboxClient } from './index.js';

/** One stored call of a session (GET /v1/sessions/:id/trajectory). */
export interface TrajectoryStep {
  n: number;
  tool: 'computer' | 'bash' | 'str_replace_based_edit_tool' | 'actions' | 'openai-computer' | 'gemini-computer' | 'desktop';
  action: string | null;
  /** As the model sent it; typed text as `textLength` unless the session kept it. */
  input: Record<string, unknown>;
  output: string | null;
  cursor: { x: number; y: number } | null;
  error: { code: string; message: string } | null;
  /** Milliseconds since the session was created. */
  startedMs: number;
  durationMs: number;
  settleMs: number | null;
  /**
   * Paths of the screenshots (fetch them with the client's credentials), or null; `frame`: the
   * session's recording at the end of a step that has no `after` of its own (JPEG).
   */
  screenshots: { before: string | null; after: string | null; frame: string | null };
}

export interface Trajectory {
  sessionId: string;
  state: string;
  endReason: string | null;
  startedAt: string;
  keepTypedText: boolean;
  totals: { steps: number; errors: number; busyMs: number; lastEndMs: number; droppedSteps: number; droppedImages: number; bytes: number };
  /** A recording to link steps to by startedMs; null until recordings exist. */
  videoUrl: string | null;
  /** When the recording started, in ms since the session was created: a step is at startedMs - videoStartMs in it. */
  videoStartMs: number | null;
  /** When the recording ended, the same way (null without one, or while it is recording). */
  videoEndMs: number | null;
  steps: TrajectoryStep[];
  /** The next page of steps (the server answers at most 1000 at a time); fetchTrajectory follows it. */
  next?: string | null;
}

export interface TrajectoryLink {
  /** The link's id, to revoke it (DELETE /v1/sessions/:id/links/:linkId). */
  id: string;
  /** The page, with its token: open it in a browser. */
  url: string;
  expiresAt: string;
}

/** The whole trajectory, every page of it. */
export async function fetchTrajectory(client: SandboxClient, sessionId: string): Promise<Trajectory> {
  const first = await client.json<Trajectory>('GET', `/v1/sessions/${encodeURIComponent(sessionId)}/trajectory`);
  for (let next = first.next; next;) {
    const page = await client.json<Trajectory>('GET', next);
    first.steps.push(...page.steps);
    next = page.next;
  }
  first.next = null;
  return first;
}

/** A link to the viewer page; its URL is made from the client's base URL (the address this client reaches). */
export function createTrajectoryLink(client: SandboxClient, sessionId: string, ttlSeconds?: number): Promise<TrajectoryLink> {
  return createLink(client, sessionId, 'trajectory', ttlSeconds);
}

/** A link to a page of the session (the trajectory viewer, a terminal): POST /v1/sessions/:id/links. */
export async function createLink(client: SandboxClient, sessionId: string, purpose: 'trajectory' | 'terminal', ttlSeconds?: number): Promise<TrajectoryLink> {
  const body = ttlSeconds === undefined ? { purpose } : { purpose, ttlSeconds };
  const link = await client.json<{ id: string; path: string; expiresAt: string }>('POST', `/v1/sessions/${encodeURIComponent(sessionId)}/links`, body);
  return { id: link.id, url: client.baseUrl + link.path, expiresAt: link.expiresAt };
}
