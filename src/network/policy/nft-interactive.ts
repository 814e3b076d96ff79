import { spawn, type ChildProcessByStdio } from 'node:child_process';
import type { Readable, Writable } from 'node:stream';
import { SerialQueue } from '../../util/serial-queue.js';
import { listTable } from './nft.js';

/** An answer not back within this is given up: the process is ended and the listing made by a one-shot nft. */
const ANSWER_TIMEOUT_MS = 2_000;
/** Names we list: our own table names and nft's families, never anything that could end or add a command. */
const WORD = /^[A-Za-z0-9_.-]{1,64}$/;
/** A listing's line beyond this is not ours (our table holds a line per session): the process is ended. */
const MAX_LINE_BYTES = 64 * 1024 * 1024;

type NftChild = ChildProcessByStdio<Writable, Readable, Readable>;

function parseListing(line: string): unknown[] | undefined {
  try {
    const parsed = JSON.parse(line) as { nftables?: unknown };
    return Array.isArray(parsed.nftables) ? (parsed.nftables as unknown[]) : undefined;
  } catch {
    return undefined;
  }
}

/**
 * The table listing that every create waits on (PolicyGuard's drift check), from one
 * long-lived `nft --json --interactive` instead of a new `nft` each time: a spawn forks this
 * process (hundreds of MB mapped), which blocked the event loop for 3-5 ms and write-faulted
 * its pages after, in the middle of the create's SSH handshake (a warm claim ~3.5 ms slower;
 * docs/benchmarks.md). nft reads one command a line and answers a listing with one line of
 * JSON on stdout, re-reading the kernel's ruleset when it changed.
 *
 * Only the good answer is taken from it: anything else (a line on stderr, such as "No such
 * file or directory" for a table that is gone, a timeout, an exit) ends the process and the
 * same listing is made by a one-shot `nft` (nft.ts), whose exit status and message say what
 * happened. The next listing starts a new process.
 */
export class InteractiveNftList {
  private child: NftChild | undefined;
  private readonly queue = new SerialQueue();
  private closed = false;
  /** A command is written and its answer not yet taken. */
  private asking = false;

  private readonly nftBin: string;
  private readonly fallback: typeof listTable;
  private readonly answerTimeoutMs: number;

  constructor(opts: { nftBin?: string; fallback?: typeof listTable; answerTimeoutMs?: number } = {}) {
    this.nftBin = opts.nftBin ?? 'nft';
    this.fallback = opts.fallback ?? listTable;
    this.answerTimeoutMs = opts.answerTimeoutMs ?? ANSWER_TIMEOUT_MS;
  }

  /** As nft.ts's listTable: the table's objects (metainfo left out), or undefined when it does not exist. */
  listTable(family: string, table: string): Promise<unknown[] | undefined> {
    if (!WORD.test(family) || !WORD.test(table)) return Promise.reject(new Error(`nft: not a table name: ${JSON.stringify(`${family} ${table}`)}`));
    return this.queue.run(async () => {
      const line = this.closed ? undefined : await this.ask(`list table ${family} ${table}\n`);
      const objects = line === undefined ? undefined : parseListing(line);
      if (objects === undefined) {
        this.stop();
        return this.fallback(family, table);
      }
      return objects.filter((o) => !(typeof o === 'object' && o !== null && 'metainfo' in o));
    });
  }

  /** Ends the process (at shutdown); later listings use one-shot nft. */
  close(): void {
    this.closed = true;
    this.stop();
  }

  private stop(): void {
    this.child?.kill('SIGKILL');
    this.child = undefined;
  }

  private start(): NftChild {
    const child = spawn(this.nftBin, ['--json', '--interactive'], { stdio: ['pipe', 'pipe', 'pipe'] });
    // Never holds the orchestrator's exit; nft ends by itself at its stdin's EOF.
    child.unref();
    for (const stream of [child.stdin, child.stdout, child.stderr] as Array<Writable | Readable>) {
      stream.on('error', () => undefined); // reported as no answer (ask)
      (stream as unknown as { unref?: () => void }).unref?.();
    }
    child.on('error', () => undefined);
    // Output while no command waits (a second line after an answer) would be read as the next
    // command's answer: the process is ended instead.
    const unasked = () => {
      if (!this.asking && this.child === child) this.stop();
    };
    child.stdout.on('data', unasked);
    child.stderr.on('data', unasked);
    child.once('exit', () => {
      if (this.child === child) this.child = undefined;
    });
    return child;
  }

  /** One command's line on stdout; undefined for anything else (the process is then ended). */
  private ask(command: string): Promise<string | undefined> {
    const child = (this.child ??= this.start());
    this.asking = true;
    return new Promise((resolve) => {
      const chunks: Buffer[] = [];
      let size = 0;
      const finish = (line: string | undefined) => {
        clearTimeout(timer);
        child.stdout.off('data', onData);
        child.stderr.off('data', onFailure);
        child.off('exit', onFailure);
        child.off('error', onFailure);
        this.asking = false;
        if (line === undefined && this.child === child) this.stop();
        resolve(line);
      };
      const onData = (chunk: Buffer) => {
        chunks.push(chunk);
        size += chunk.length;
        const end = chunk.indexOf(0x0a);
        // One line and nothing after it is the answer; more is not ours to read.
        if (end >= 0) finish(end === chunk.length - 1 ? Buffer.concat(chunks, size - 1).toString('utf8') : undefined);
        else if (size > MAX_LINE_BYTES) finish(undefined);
      };
      const onFailure = () => finish(undefined);
      const timer = setTimeout(onFailure, this.answerTimeoutMs);
      child.stdout.on('data', onData);
      child.stderr.on('data', onFailure);
      child.once('exit', onFailure);
      child.once('error', onFailure);
      child.stdin.write(command);
    });
  }
}
