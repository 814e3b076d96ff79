import { Command, Option } from 'commander';
import { openKeyStore } from '../api/auth/key-store-file.js';
import { newApiKeyRecord, type ApiKeyRecord } from '../api/auth/key-store.js';
import { PgClusterStore } from '../cluster/store/pg-cluster-store.js';
import { NotFoundError } from '../errors.js';
import { parseDuration } from '../util/duration.js';

/**
 * `sbx keys create|list|revoke`: API keys, managed on the orchestrator's store directly (run
 * them as the user that runs `sbx serve`, with the same state dir). The server reads keys per
 * request: a key created or revoked here counts at once, without a restart. Once a key has
 * existed, a server stays keyed even if every key is revoked; `keys reset --yes` and a
 * restart (or `serve --no-auth`) is the deliberate way back to keyless.
 */
export function keysCommand(defaultStateDir: string): Command {
  const keys = new Command('keys').description('API keys: each belongs to a tenant, who sees only its own sessions');
  const stateDir = () => new Option('--state-dir <dir>', "the orchestrator's state dir").env('SBX_STATE_DIR').default(defaultStateDir);
  const db = () => new Option('--db <postgres-url>', "a cluster's keys, in its database, instead of this host's (docs/cluster.md)");

  keys
    .command('create')
    .description('make a key for a tenant and print it (shown this once; only its hash is stored)')
    .requiredOption('--tenant <name>', 'the tenant it acts for (a-z, 0-9, ".", "_", "-")')
    .option('--expires-in <duration>', 'lifetime, e.g. 30d, 12h, 15m (default: no expiry)')
    .addOption(stateDir())
    .addOption(db())
    .action(async (opts: { tenant: string; expiresIn?: string; stateDir: string; db?: string }) => {
      const expiresAt = opts.expiresIn === undefined ? undefined : new Date(Date.now() + parseDuration(opts.expiresIn) * 1000);
      await withKeyBook(opts, async (book) => {
        const { record, key } = await book.create(opts.tenant, expiresAt);
        console.log(key);
        console.error(
          `sbx: key ${record.id} for tenant "${record.tenant}"${record.expiresAt ? `, expires ${record.expiresAt}` : ', no expiry'}. ` +
            'This is the only time it is shown: keep it (e.g. export SBX_API_KEY=...).',
        );
      });
    });

  keys
    .command('list')
    .description('list keys (ids, tenants, dates; never the keys)')
    .addOption(stateDir())
    .addOption(db())
    .action(async (opts: { stateDir: string; db?: string }) => {
      await withKeyBook(opts, async (book) => {
        const all = await book.list();
        if (all.length === 0) console.error('sbx: no API keys (the server runs keyless on loopback only)');
        for (const k of all) console.log(`${k.id}  ${k.tenant.padEnd(20)} ${statusOf(k).padEnd(8)} created ${k.createdAt}  expires ${k.expiresAt ?? 'never'}`);
      });
    });

  keys
    .command('revoke <id>')
    .description('revoke a key for good (takes effect at once)')
    .addOption(stateDir())
    .addOption(db())
    .action(async (id: string, opts: { stateDir: string; db?: string }) => {
      await withKeyBook(opts, async (book) => {
        const record = await book.revoke(id);
        console.log(`${record.id} revoked at ${record.revokedAt}`);
      });
    });
  keys
    .command('reset')
    .description('delete every key, revoked or not, so that a loopback server started afterwards runs keyless again')
    .option('--yes', 'really delete them (required: this reopens keyless mode at the next start)')
    .addOption(stateDir())
    .action((opts: { yes?: boolean; stateDir: string }) => {
      if (!opts.yes) {
        console.error(
          'sbx: `keys reset` deletes every API key: a loopback server started afterwards in auto mode serves anyone on this machine ' +
            'without a key. A running server keeps requiring keys until it is restarted. Run it again with --yes to do it.',
        );
        process.exitCode = 1;
        return;
      }
      withKeys(opts.stateDir, (store) => {
        const deleted = store.deleteAll();
        console.error(`sbx: deleted ${deleted} key(s). A running server keeps requiring keys until it is restarted; restarted on loopback, it runs keyless.`);
      });
    });
  return keys;
}

function withKeys(stateDir: string, use: (store: ReturnType<typeof openKeyStore>['keys']) => void): void {
  const opened = openKeyStore(stateDir);
  try {
    use(opened.keys);
  } finally {
    opened.close();
  }
}

/** The keys `sbx keys` works on: this host's (SQLite) or, with --db, a cluster's (PostgreSQL). */
interface KeyBook {
  create(tenant: string, expiresAt?: Date): Promise<{ record: ApiKeyRecord; key: string }>;
  list(): Promise<ApiKeyRecord[]>;
  revoke(id: string): Promise<ApiKeyRecord>;
}

async function withKeyBook(opts: { stateDir: string; db?: string }, use: (book: KeyBook) => Promise<void>): Promise<void> {
  if (opts.db === undefined) {
    const opened = openKeyStore(opts.stateDir);
    try {
      const { keys } = opened;
      await use({ create: async (tenant, expiresAt) => keys.create(tenant, expiresAt), list: async () => keys.list(), revoke: async (id) => keys.revoke(id) });
    } finally {
      opened.close();
    }
    return;
  }
  const store = new PgClusterStore({ url: opts.db });
  try {
    await store.migrate();
    await use({
      async create(tenant, expiresAt) {
        const made = newApiKeyRecord(tenant, expiresAt);
        await store.createKey(made.record);
        return made;
      },
      list: () => store.listKeys(),
      async revoke(id) {
        await store.revokeKey(id);
        const record = await store.findKey(id);
        if (!record) throw new NotFoundError(`no API key with id "${id}" in the cluster (see \`sbx keys list --db ...\`)`);
        return record;
      },
    });
  } finally {
    await store.close();
  }
}

function statusOf(k: ApiKeyRecord, now = Date.now()): string {
  if (k.revokedAt) return 'revoked';
  if (k.expiresAt && Date.parse(k.expiresAt) <= now) return 'expired';
  return 'active';
}
