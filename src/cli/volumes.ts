import { Command, InvalidArgumentError } from 'commander';
import type { SandboxClient } from '../client/index.js';

function mib(value: string): number {
  if (!/^[1-9][0-9]{0,7}$/.test(value)) throw new InvalidArgumentError('must be a whole number of MiB');
  return Number(value);
}

/** A `--volume name:/path[:ro]` of `sbx create`. */
export function volumeFlag(value: string, previous: Array<{ name: string; path: string; readOnly: boolean }> = []) {
  const match = /^([^:]+):(\/[^:]*)(?::(ro|rw))?$/.exec(value);
  if (!match) throw new InvalidArgumentError('must be name:/guest/path, or name:/guest/path:ro');
  return [...previous, { name: match[1]!, path: match[2]!, readOnly: match[3] === 'ro' }];
}

/** `sbx volume create|ls|get|rm`: the tenant's volumes (docs/volumes.md). */
export function volumeCommand(client: () => SandboxClient): Command {
  const volume = new Command('volume').description('volumes: disks that outlive sessions (sbx create --volume name:/path[:ro] mounts one)');
  volume
    .command('create')
    .argument('<name>', 'its name (letters, digits, - and _)')
    .requiredOption('--size <MiB>', 'its size in MiB', mib)
    .description('create an empty volume')
    .action(async (name: string, opts: { size: number }) => {
      console.log(JSON.stringify(await client().volumes.create({ name, sizeMiB: opts.size }), null, 2));
    });
  volume
    .command('ls')
    .description("list the tenant's volumes")
    .action(async () => {
      for (const v of await client().volumes.list()) {
        const users = v.mountedBy.map((m) => `${m.sessionId}${m.readOnly ? ' (ro)' : ''}`).join(', ');
        console.log(`${v.name.padEnd(24)} ${String(v.sizeMiB).padStart(7)} MiB  ${(v.usedBytes / 2 ** 20).toFixed(1).padStart(8)} MiB used  ${users || '-'}`);
      }
    });
  volume
    .command('get')
    .argument('<name>')
    .description('describe a volume')
    .action(async (name: string) => console.log(JSON.stringify(await client().volumes.get(name), null, 2)));
  volume
    .command('rm')
    .argument('<name>')
    .description('delete a volume and its data (refused while a session has it mounted)')
    .action(async (name: string) => console.log(JSON.stringify(await client().volumes.delete(name), null, 2)));
  return volume;
}
