import http from 'node:http';
import type { Duplex } from 'node:stream';

/** Guest ports of one session whose idle channels are kept (the least recently used beyond: its idle ones closed). */
export const MAX_POOLED_PORTS_PER_SESSION = 4;
/** An idle pooled channel is closed after this long unused (shorter than typical servers' own keep-alive timeouts). */
export const FREE_CHANNEL_TIMEOUT_MS = 5_000;

/** What a guest port's channel is opened with (the session's SSH connection, GuestTransport.forward). */
export interface PortConnection {
  forward(host: string, port: number): Promise<Duplex>;
  readonly isClosed: boolean;
}

/** Where one pooled channel stands. */
interface ChannelState {
  /** Destroyed, ended or closed by either side: never handed out again. */
  dead: boolean;
  /** In an agent's free list (between two requests). */
  free: boolean;
  freeTimer: NodeJS.Timeout | undefined;
}

/** What Node's HTTP client and Agent call on a socket beyond a Duplex (net.Socket's names). */
interface SocketMethods {
  setKeepAlive(enable?: boolean, initialDelay?: number): ChannelSocket;
  setNoDelay(noDelay?: boolean): ChannelSocket;
  setTimeout(ms: number, callback?: () => void): ChannelSocket;
  ref(): ChannelSocket;
  unref(): ChannelSocket;
  timeout: number | undefined;
}

/** An SSH channel that Node's HTTP client may take for a socket. */
export type ChannelSocket = Duplex & SocketMethods;

const STATES = new WeakMap<Duplex, ChannelState>();

/** The adapted channel's state (undefined for a stream not made by socketOfChannel). */
function stateOf(socket: Duplex): ChannelState | undefined {
  return STATES.get(socket);
}

/**
 * Gives an ssh2 channel what Node's Agent and ClientRequest call on a net.Socket. There is no
 * TCP socket of ours under a channel: keep-alive and Nagle are the SSH connection's business
 * (no-ops), and a channel holds no handle of the event loop (ref/unref are no-ops). The
 * channel's destroy() (ssh2's: it sends CLOSE and waits for the guest's) is wrapped so that
 * a destroyed channel leaves its agent at once ('agentRemove'): ssh2 does not mark it
 * `destroyed` and emits 'close' only when the guest answers, and the agent would hand out a
 * channel of its free list that is not marked `destroyed`.
 */
export function socketOfChannel(channel: Duplex): ChannelSocket {
  const state: ChannelState = { dead: false, free: false, freeTimer: undefined };
  let timeoutTimer: NodeJS.Timeout | undefined;
  let removed = false;
  const markDead = () => {
    state.dead = true;
    clearTimeout(state.freeTimer);
    clearTimeout(timeoutTimer);
  };
  const ssh2Destroy = channel.destroy.bind(channel);
  const socket: ChannelSocket = Object.assign(channel, {
    timeout: undefined as number | undefined,
    setKeepAlive: () => socket,
    setNoDelay: () => socket,
    ref: () => socket,
    unref: () => socket,
    /** net.Socket's 'timeout' after `ms` (counted from the call: Node's Agent sets none on our channels, see keepSocketAlive). */
    setTimeout: (ms: number, callback?: () => void) => {
      clearTimeout(timeoutTimer);
      timeoutTimer = undefined;
      socket.timeout = ms;
      if (callback) {
        if (ms > 0) socket.once('timeout', callback);
        else socket.removeListener('timeout', callback);
      }
      if (ms > 0) timeoutTimer = setTimeout(() => socket.emit('timeout'), ms).unref();
      return socket;
    },
    /**
     * What Node's HTTP client calls when an answer ends its connection (HTTP/1.0, `Connection:
     * close`): the channel is closed once our side is written, whether or not the guest
     * closes its own (ending our side only would leave a guest that never closes holding it).
     */
    destroySoon: () => {
      if (socket.writable) socket.end();
      if (socket.writableFinished) socket.destroy();
      else socket.once('finish', () => socket.destroy());
    },
    destroy: (error?: Error) => {
      markDead();
      ssh2Destroy(error);
      if (!removed) {
        removed = true;
        socket.emit('agentRemove');
      }
      return socket;
    },
  });
  // The guest ended its side (an idle keep-alive connection it closed, an HTTP/1.0 answer):
  // never reusable. While free nothing else listens, so it is closed here.
  socket.once('end', () => {
    const wasFree = state.free;
    markDead();
    if (wasFree) socket.destroy();
  });
  socket.once('close', markDead);
  socket.on('error', markDead);
  STATES.set(socket, state);
  return socket;
}

/** A channel to a guest port could not be opened (nothing listens there, or the connection is down). */
export class ChannelOpenError extends Error {}

/** Bytes from the guest on a connection no request is using: it is out of step with HTTP, closed. */
function unexpectedBytes(this: Duplex): void {
  this.destroy();
}

/**
 * Node's keep-alive Agent over SSH direct-tcpip channels, for one guest port of one session's
 * connection: the channel of a finished exchange stays open for the next request (an HTTP/1.1
 * server keeps its connection), as a reverse proxy keeps its upstream connections. Bounded:
 * `maxFree` idle channels, each closed after FREE_CHANNEL_TIMEOUT_MS unused. Node decides
 * reuse from the answer (HTTP/1.0 or `Connection: close`: the channel ends with it).
 *
 * One agent serves every client of its session's port: a channel made for one client may
 * carry another client's next request. That is acceptable because a channel only ever goes to
 * the same session and port, where the same guest server answers all of them anyway; nothing
 * of one client (its credentials are taken out before, see api/routes/ports.ts) stays on a
 * channel once its exchange is over, and an idle channel the guest writes on is closed.
 */
export class ChannelAgent extends http.Agent {
  private retired = false;

  constructor(
    private readonly open: () => Promise<Duplex>,
    maxFree: number,
    private readonly freeTimeoutMs = FREE_CHANNEL_TIMEOUT_MS,
  ) {
    // lifo: the most recently used channel first (the least likely to have been closed by the guest).
    super({ keepAlive: true, maxFreeSockets: maxFree, scheduling: 'lifo' });
  }

  /** The async form: the channel (or the failure) is handed to the agent's callback once open. */
  override createConnection(_options: http.ClientRequestArgs, callback?: (err: Error | null, stream: Duplex) => void): undefined {
    // Node's callback takes no stream with an error (its typings ask for one in every case).
    const done = callback as ((err: Error | null, stream?: Duplex) => void) | undefined;
    this.open().then(
      (channel) => done?.(null, socketOfChannel(channel)),
      (err: Error) => done?.(new ChannelOpenError(err.message)),
    );
    return undefined;
  }

  /** Called by the agent when an exchange is over and the channel could stay: false closes it. */
  override keepSocketAlive(socket: Duplex): boolean {
    const state = stateOf(socket);
    if (this.retired || !state || state.dead || !socket.readable || !socket.writable) return false;
    state.free = true;
    state.freeTimer = setTimeout(() => socket.destroy(), this.freeTimeoutMs).unref();
    socket.on('data', unexpectedBytes);
    return true;
  }

  override reuseSocket(socket: Duplex, request: http.ClientRequest): void {
    const state = stateOf(socket);
    if (state) {
      state.free = false;
      clearTimeout(state.freeTimer);
    }
    socket.removeListener('data', unexpectedBytes);
    super.reuseSocket(socket, request);
  }

  /** Closes the idle channels (in-flight ones finish their exchange). */
  closeIdle(): void {
    for (const list of Object.values(this.freeSockets)) for (const socket of [...(list ?? [])]) socket.destroy();
  }

  /** No channel is kept from now on; the idle ones are closed. */
  retire(): void {
    this.retired = true;
    this.closeIdle();
  }

  /** Channels idle and in use, for tests and diagnostics. */
  counts(): { free: number; busy: number } {
    const count = (lists: NodeJS.ReadOnlyDict<unknown[]>) => Object.values(lists).reduce((n, list) => n + (list?.length ?? 0), 0);
    return { free: count(this.freeSockets), busy: count(this.sockets) };
  }
}

/**
 * The keep-alive agents of every session, by the session's connection object (a WeakMap: they
 * go with the connection, and a session that gets another connection gets other agents) and
 * guest port: a pooled channel is only ever reused for the same session and port. A session
 * keeps idle channels for MAX_POOLED_PORTS_PER_SESSION ports at most, `maxFreePerPort` each:
 * what idle channels cost (a guest-side connection and an SSH window each) stays bounded.
 * In-flight requests are not counted here: each holds one of the session's channel slots.
 */
export class GuestPortPools {
  private readonly bySession = new WeakMap<PortConnection, Map<number, ChannelAgent>>();

  constructor(
    private readonly maxFreePerPort: number,
    private readonly freeTimeoutMs = FREE_CHANNEL_TIMEOUT_MS,
  ) {}

  /** The agent for a port of a session (undefined when keep-alive is off: a channel per request). */
  agentFor(connection: PortConnection, port: number): ChannelAgent | undefined {
    if (this.maxFreePerPort === 0) return undefined;
    if (connection.isClosed) {
      this.drop(connection);
      return undefined;
    }
    let agents = this.bySession.get(connection);
    if (!agents) this.bySession.set(connection, (agents = new Map<number, ChannelAgent>()));
    let agent = agents.get(port);
    if (agent) {
      // Most recently used last: the first one is the one to retire.
      agents.delete(port);
    } else {
      agent = new ChannelAgent(() => connection.forward('127.0.0.1', port), this.maxFreePerPort, this.freeTimeoutMs);
      for (const [oldestPort, oldest] of agents) {
        if (agents.size < MAX_POOLED_PORTS_PER_SESSION) break;
        oldest.retire();
        agents.delete(oldestPort);
      }
    }
    agents.set(port, agent);
    return agent;
  }

  /** Every idle channel of the session closed and its agents forgotten (in-flight requests finish). */
  drop(connection: PortConnection): void {
    const agents = this.bySession.get(connection);
    if (!agents) return;
    for (const agent of agents.values()) agent.retire();
    this.bySession.delete(connection);
  }

  /** The session's pooled ports and channels (idle and in use), for tests and diagnostics. */
  stats(connection: PortConnection): { ports: number; free: number; busy: number } {
    const agents = [...(this.bySession.get(connection)?.values() ?? [])];
    const counts = agents.map((agent) => agent.counts());
    return { ports: agents.length, free: counts.reduce((n, c) => n + c.free, 0), busy: counts.reduce((n, c) => n + c.busy, 0) };
  }
}
