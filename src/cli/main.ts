#!/usr/bin/env node
import { writeFile } from 'node:fs/promises';
import path from 'node:path';
import { Command, Option } from 'commander';
import { DEFAULT_ORCHESTRATOR_URL, SandboxClient, SandboxError } from '../client/index.js';
import { defaultConfig } from '../config.js';
import { buildImage } from '../guest/image/builder.js';
import { BUILT_IN_TEMPLATE_NAMES, builtInRecipe } from '../guest/image/templates.js';
import { clusterCommands } from './cluster.js';
import { desktopCommand } from './desktop.js';
import { integer, serveCommand } from './serve.js';
import { keysCommand } from './api-keys.js';
import { runStdioServer } from '../mcp/stdio.js';
import { templateCommand } from './templates.js';
import { volumeCommand, volumeFlag } from './volumes.js';
import { snapshotCommand } from './snapshots.js';
import { trajectoryCommand } from './trajectory.js';
import { recordingCommand } from './recording.js';
import { runCommand } from './run.js';
import { portCommands } from './ports.js';
import { execCommand } from './exec.js';

/** The file extension of an image by its first bytes (the session's default format may be any). */
function extensionOf(image: Buffer): string {
  if (image.subarray(0, 3).equals(Buffer.from([0xff, 0xd8, 0xff]))) return 'jpg';
  if (image.toString('latin1', 0, 4) === 'RIFF' && image.toString('latin1', 8, 12) === 'WEBP') return 'webp';
  return 'png';
}

// The entry point: the only place (with src/bench/main.ts) that reads the process's environment.
const defaults = defaultConfig(process.env);
const program = new Command('sbx')
  .description('Disposable Linux desktops for computer-use agents')
  .addOption(new Option('--url <url>', 'orchestrator URL (client commands)').env('SBX_URL').default(DEFAULT_ORCHESTRATOR_URL))
  .addOption(new Option('--api-key <key>', 'API key (client commands)').env('SBX_API_KEY'));

program.addCommand(serveCommand(defaults));
for (const command of clusterCommands(defaults)) program.addCommand(command);

const image = program.command('image').description('the guest images of the built-in templates');
image
  .command('build')
  .description("build the built-in templates' guest images with debootstrap (each cached by a hash of its recipe)")
  .addOption(new Option('--template <name>', 'build only this built-in template (default: all of them, minimal first)').choices(BUILT_IN_TEMPLATE_NAMES))
  .option('--force', 'rebuild even if the image is cached')
  .addOption(new Option('--images-dir <dir>').env('SBX_IMAGES_DIR').default(defaults.imagesDir))
  .action(async (opts: { template?: string; force?: boolean; imagesDir: string }) => {
    // One at a time: two debootstraps at once would only compete for the same disk and mirror.
    for (const name of opts.template ? [opts.template] : BUILT_IN_TEMPLATE_NAMES) {
      console.error(`sbx: template ${name}`);
      const built = await buildImage({
        imagesDir: opts.imagesDir,
        recipe: builtInRecipe(name),
        force: opts.force,
        onProgress: (line) => console.error(`[${name}] ${line}`),
      });
      console.log(`${name} ${built.dir}`);
    }
  });

function client(): SandboxClient {
  const { url, apiKey } = program.opts<{ url: string; apiKey?: string }>();
  return new SandboxClient({ baseUrl: url, apiKey });
}

program.addCommand(keysCommand(defaults.stateDir));
program.addCommand(desktopCommand(client));
program.addCommand(templateCommand(defaults.imagesDir, defaults.subnet));
program.addCommand(trajectoryCommand(client));
program.addCommand(recordingCommand(client));
program.addCommand(runCommand(client));
for (const command of portCommands(client)) program.addCommand(command);
program.addCommand(execCommand(client));
program.addCommand(volumeCommand(client));
program.addCommand(snapshotCommand(client));

interface CreateFlags {
  width?: number;
  height?: number;
  timeout?: number;
  maxLifetime?: number;
  egress?: boolean;
  screenshotFormat?: 'png' | 'jpeg' | 'webp';
  screenshotQuality?: number;
  template?: string;
  record?: boolean;
  volume?: Array<{ name: string; path: string; readOnly: boolean }>;
  snapshot?: string;
}

program
  .command('create')
  .description('create a sandbox and print its description')
  .option('-W, --width <px>', 'screen width', integer)
  .option('-H, --height <px>', 'screen height', integer)
  .option('-t, --timeout <seconds>', 'idle timeout', integer)
  .option('--max-lifetime <seconds>', 'maximum lifetime (at most the server maximum)', integer)
  .option('--egress', 'let the sandbox reach the internet (NAT); off by default')
  .option('--template <name>', "the template to boot (`sbx template ls`; default: the server's)")
  .option('--volume <name:/path[:ro]>', 'mount a volume (`sbx volume create`); repeatable', volumeFlag)
  .option('--snapshot <id>', "start from a snapshot (`sbx snapshot create`): a fork with its own keys; its template and screen are the snapshot's")
  .option('--record', 'record the screen to a video from the start (`sbx recording <id>` downloads it)')
  .addOption(new Option('--screenshot-format <format>', "the session's default screenshot format (png)").choices(['png', 'jpeg', 'webp']))
  .option('--screenshot-quality <1-100>', 'its quality, for jpeg and webp (default jpeg 80, webp 100: lossless)', integer)
  .action(async (opts: CreateFlags) => {
    const screenshot =
      opts.screenshotFormat || opts.screenshotQuality !== undefined ? { format: opts.screenshotFormat, quality: opts.screenshotQuality } : undefined;
    const sandbox = await client().create({
      ...(opts.template ? { template: opts.template } : {}),
      width: opts.width,
      height: opts.height,
      timeoutSeconds: opts.timeout,
      maxLifetimeSeconds: opts.maxLifetime,
      ...(opts.egress ? { network: { egress: true } } : {}),
      ...(screenshot ? { screenshot } : {}),
      ...(opts.record ? { record: true } : {}),
      ...(opts.volume ? { volumes: opts.volume } : {}),
      ...(opts.snapshot ? { snapshot: opts.snapshot } : {}),
    });
    console.log(JSON.stringify(sandbox.info, null, 2));
  });

program
  .command('mcp')
  .description('an MCP server on stdin/stdout (for Claude Desktop, Claude Code, IDEs) using the orchestrator at --url with --api-key')
  .action(async () => {
    await runStdioServer(client());
    // stdin's end closes the server; the client's keep-alive sockets must not keep the process.
    process.exit(0);
  });

program
  .command('keepalive <id>')
  .description("reset a session's idle timer (and optionally set its idle timeout)")
  .option('-t, --timeout <seconds>', 'new idle timeout', integer)
  .action(async (id: string, opts: { timeout?: number }) => {
    const info = await client().keepalive(id, opts.timeout === undefined ? {} : { timeoutSeconds: opts.timeout });
    console.log(`${info.id} expires ${info.expiresAt} (lifetime ends ${info.lifetimeEndsAt})`);
  });

program
  .command('pause <id>')
  .description('pause a session: every process stops where it is until it is resumed (docs/pause.md)')
  .addOption(
    new Option('-m, --mode <mode>', 'memory (frozen in place), disk, or auto (disk where available)').choices(['memory', 'disk', 'auto']).default('auto'),
  )
  .action(async (id: string, opts: { mode: 'memory' | 'disk' | 'auto' }) => {
    const info = await client().pause(id, opts.mode);
    console.log(`${info.id} ${info.state} (${info.paused?.mode ?? 'running'} since ${info.paused?.since ?? '-'})`);
  });

program
  .command('resume <id>')
  .description('resume a paused session')
  .action(async (id: string) => {
    const info = await client().resume(id);
    console.log(`${info.id} ${info.state}`);
  });

program
  .command('ls')
  .description('list live sessions')
  .action(async () => {
    const sessions = await client().list();
    for (const s of sessions)
      console.log(
        `${s.id}  ${s.state.padEnd(10)} ${s.runtime.padEnd(10)} ${s.template.padEnd(12)} ${s.display.width}x${s.display.height}  expires ${s.expiresAt}`,
      );
    if (sessions.length === 0) console.error('no sessions');
  });

program
  .command('screenshot <id>')
  .description("save an image of the sandbox screen (PNG unless --format or the session's default says otherwise)")
  .option('-o, --output <file>', 'where to write it (default screenshot.<format>)')
  .addOption(new Option('-f, --format <format>', 'image format').choices(['png', 'jpeg', 'webp']))
  .option('-q, --quality <1-100>', 'jpeg and webp quality (webp at 100 is lossless)', integer)
  .option('--scaled', 'as the model sees the screen (scaled down), not at its real size')
  .action(async (id: string, opts: { output?: string; format?: 'png' | 'jpeg' | 'webp'; quality?: number; scaled?: boolean }) => {
    const image = await client().screenshot(id, { scaled: opts.scaled, format: opts.format, quality: opts.quality });
    const output = opts.output ?? `screenshot.${extensionOf(image)}`;
    await writeFile(output, image);
    console.log(path.resolve(output));
  });

program
  .command('act <id> <json>')
  .description('perform a computer-use action, e.g. \'{"action":"left_click","coordinate":[10,20]}\'')
  .action(async (id: string, json: string) => {
    const result = await client().action(id, JSON.parse(json) as { action: string });
    if (result.image) result.image.data = `<${result.image.data.length} base64 characters>`;
    console.log(JSON.stringify(result, null, 2));
  });

program
  .command('view <id>')
  .description('print a live-view URL of a sandbox for a browser (view only unless --control)')
  .option('--control', 'the URL may also type and click (and take over from the agent)')
  .option('--ttl <seconds>', 'how long the URL works (default 3600)', integer)
  .action(async (id: string, opts: { control?: boolean; ttl?: number }) => {
    const sandbox = await client().connect(id);
    const view = await sandbox.liveView({ mode: opts.control ? 'control' : 'view', ttlSeconds: opts.ttl });
    console.log(view.url);
  });

program
  .command('rm <id>')
  .description('destroy a sandbox (idempotent)')
  .action(async (id: string) => {
    const info = await client().destroy(id);
    console.log(`${info.id} ${info.state}`);
  });

program.parseAsync(process.argv).catch((err: unknown) => {
  if (err instanceof SandboxError) console.error(`sbx: ${err.message} (${err.code})`);
  else if (err instanceof Error && /ECONNREFUSED|fetch failed/.test(err.message + String(err.cause))) {
    console.error(`sbx: cannot reach the orchestrator at ${program.opts<{ url: string }>().url}: start it with \`sbx serve\` or set --url`);
  } else console.error(`sbx: ${err instanceof Error ? err.message : String(err)}`);
  process.exit(1);
});
