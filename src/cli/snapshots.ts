import { Command } from 'commander';
import type { SandboxClient } from '../client/index.js';

/** `sbx snapshot create|ls|get|rm`: the tenant's snapshots (docs/snapshots.md); `sbx create --snapshot <id>` forks one. */
export function snapshotCommand(client: () => SandboxClient): Command {
  const snapshot = new Command('snapshot').description(
    "snapshots: a session's desktop saved, memory and disk (sbx create --snapshot <id> starts a session from one)",
  );
  snapshot
    .command('create')
    .argument('<session>', 'the running session to snapshot (it pauses for a moment and runs on)')
    .option('--name <name>', 'a name for it (letters, digits, -, _ and .)')
    .description('snapshot a running session')
    .action(async (session: string, opts: { name?: string }) => {
      console.log(JSON.stringify(await client().snapshots.create(session, opts.name ? { name: opts.name } : {}), null, 2));
    });
  snapshot
    .command('ls')
    .description("list the tenant's snapshots")
    .action(async () => {
      for (const s of await client().snapshots.list()) {
        console.log(
          `${s.id}  ${(s.name ?? '-').padEnd(24)} ${s.template.padEnd(10)} ${(s.bytes / 2 ** 20).toFixed(1).padStart(8)} MiB  ${s.createdAt}  of ${s.sessionId}`,
        );
      }
    });
  snapshot
    .command('get')
    .argument('<id>')
    .description('describe a snapshot')
    .action(async (id: string) => console.log(JSON.stringify(await client().snapshots.get(id), null, 2)));
  snapshot
    .command('rm')
    .argument('<id>')
    .description('delete a snapshot and its files (sessions started from it go on)')
    .action(async (id: string) => console.log(JSON.stringify(await client().snapshots.delete(id), null, 2)));
  return snapshot;
}
