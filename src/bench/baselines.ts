import { spawn } from 'node:child_process';
import { writeFile } from 'node:fs/promises';
import path from 'node:path';
import type { GuestConnection } from '../transport/ssh-connection.js';

/**
 * The floor: the same command timed inside the guest with bash's $EPOCHREALTIME (no fork for
 * the clock), so the figure is what the command itself costs, with no transport at all.
 */
export async function timeInGuest(connection: GuestConnection, display: number, command: string, n: number): Promise<number[]> {
  const script = `export DISPLAY=:${display}
for i in 1 2; do ${command} >/dev/null 2>&1; done
for i in $(seq ${n}); do s=$EPOCHREALTIME; ${command} >/dev/null 2>&1; e=$EPOCHREALTIME; echo "$s $e"; done`;
  return timedLines(connection, script);
}

/**
 * The floor of a pointer or key action: the very same requests written to a persistent
 * sbx-input in the guest (a bash coprocess) and all its answers read, timed in the guest.
 */
export async function timeInputInGuest(connection: GuestConnection, display: number, helper: string, requests: string, n: number): Promise<number[]> {
  const count = requests.split('\n').length - 1;
  const script = `export DISPLAY=:${display}
coproc HELPER { exec /usr/bin/python3 -I ${helper}; }
send() { printf '%s' ${quoteForBash(requests)} >&"\${HELPER[1]}"; for ((k = 0; k < ${count}; k++)); do read -r _ <&"\${HELPER[0]}"; done; }
for i in 1 2; do send; done
for i in $(seq ${n}); do s=$EPOCHREALTIME; send; e=$EPOCHREALTIME; echo "$s $e"; done`;
  return timedLines(connection, script);
}

function quoteForBash(script: string): string {
  return `'${script.replace(/'/g, `'\\''`)}'`;
}

/**
 * The naive design: a fresh `ssh` process (new TCP connection, key exchange, auth) per
 * command, with the host key pinned through a known_hosts file of its own.
 */
export async function naiveSsh(opts: {
  keyFile: string;
  hostPublicKey: string;
  address: string;
  workDir: string;
}): Promise<(command: string) => Promise<void>> {
  const knownHosts = path.join(opts.workDir, 'known_hosts');
  await writeFile(knownHosts, `${opts.address} ${opts.hostPublicKey.trim()}\n`, { mode: 0o600 });
  return (command) =>
    new Promise((resolve, reject) => {
      const child = spawn(
        'ssh',
        [
          '-i', opts.keyFile,
          '-o', `UserKnownHostsFile=${knownHosts}`,
          '-o', 'StrictHostKeyChecking=yes',
          '-o', 'BatchMode=yes',
          '-o', 'ControlMaster=no',
          '-o', 'ControlPath=none',
          `user@${opts.address}`,
          command,
        ],
        { stdio: ['ignore', 'ignore', 'pipe'] },
      );
      let stderr = '';
      child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
      child.on('error', reject);
      child.on('close', (code) => (code === 0 ? resolve() : reject(new Error(`ssh exited ${code}: ${stderr.trim()}`))));
    });
}

/** Runs a bash script that prints "start end" ($EPOCHREALTIME) per run; the runs in ms. */
async function timedLines(connection: GuestConnection, script: string): Promise<number[]> {
  const result = await connection.exec(`bash -c ${quoteForBash(script)}`, { timeoutMs: 120_000 });
  return result.stdout
    .toString('utf8')
    .trim()
    .split('\n')
    .map((line) => {
      const [s, e] = line.split(' ').map(Number);
      return ((e as number) - (s as number)) * 1000;
    });
}
