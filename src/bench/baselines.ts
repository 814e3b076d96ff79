import { spawn } from 'node:child_process';
import { writeFile } from 'node:fs/promises';
import path from 'node:path';
import type { GuestTransport } from '../transport/index.js';

/**
 * The floor: the same command timed inside the guest with bash's $EPOCHREALTIME (no fork for
 * the clock), so the figure is what the command itself costs, with no transport at all.
 */
export async function timeInGuest(connection: GuestTransport, display: number, command: string, n: number): Promise<number[]> {
  const script = `export DISPLAY=:${display}
for i in 1 2; do ${command} >/dev/null 2>&1; done
for i in $(seq ${n}); do s=$EPOCHREALTIME; ${command} >/dev/null 2>&1; e=$EPOCHREALTIME; echo "$s $e"; done`;
  return timedLines(connection, script);
}

/**
 * timeInGuest, plus the CPU the command costs per run: the children's user + system time
 * that bash's `times` reports (the rusage of the commands it waited for), before and after
 * the timed runs. Only the command's own process counts (scrot: not the X server).
 */
export async function timeInGuestWithCpu(
  connection: GuestTransport,
  display: number,
  command: string,
  n: number,
): Promise<{ samples: number[]; cpuSecondsPerRun: number }> {
  // `times` is a builtin run in this shell (no subshell, whose children would not count).
  const script = `export DISPLAY=:${display}
for i in 1 2; do ${command} >/dev/null 2>&1; done
echo before; times
for ((i = 0; i < ${n}; i++)); do s=$EPOCHREALTIME; ${command} >/dev/null 2>&1; e=$EPOCHREALTIME; echo "$s $e"; done
echo after; times`;
  const result = await connection.exec(`bash -c ${quoteForBash(script)}`, { timeoutMs: 120_000 });
  const lines = result.stdout.toString('utf8').trim().split('\n');
  const childrenCpu = (marker: string): number => {
    // `times` prints the shell's own user and system time, then its children's.
    const line = lines[lines.indexOf(marker) + 2] ?? '';
    return line.split(' ').reduce((sum, t) => sum + minutesSeconds(t), 0);
  };
  const samples = lines.filter((l) => /^\d+\.\d+ \d+\.\d+$/.test(l)).map(startEndMs);
  return { samples, cpuSecondsPerRun: (childrenCpu('after') - childrenCpu('before')) / n };
}

/** "1m2.345s" (bash's `times`) in seconds. */
function minutesSeconds(text: string): number {
  const match = /^(\d+)m([\d.]+)s$/.exec(text);
  return match ? Number(match[1]) * 60 + Number(match[2]) : Number.NaN;
}

function startEndMs(line: string): number {
  const [s, e] = line.split(' ').map(Number);
  return ((e as number) - (s as number)) * 1000;
}

/**
 * The floor of a pointer or key action: the very same requests written to a persistent
 * sbx-input in the guest (a bash coprocess) and all its answers read, timed in the guest.
 */
export async function timeInputInGuest(connection: GuestTransport, display: number, helper: string, requests: string, n: number): Promise<number[]> {
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
          '-i',
          opts.keyFile,
          '-o',
          `UserKnownHostsFile=${knownHosts}`,
          '-o',
          'StrictHostKeyChecking=yes',
          '-o',
          'BatchMode=yes',
          '-o',
          'ControlMaster=no',
          '-o',
          'ControlPath=none',
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
async function timedLines(connection: GuestTransport, script: string): Promise<number[]> {
  const result = await connection.exec(`bash -c ${quoteForBash(script)}`, { timeoutMs: 120_000 });
  return result.stdout.toString('utf8').trim().split('\n').map(startEndMs);
}
