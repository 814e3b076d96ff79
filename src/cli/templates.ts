import { Command, InvalidArgumentError, Option } from 'commander';
import { TemplateCatalogue } from '../templates/catalogue.js';
import { buildTemplateFile, DEFAULT_BUILD_MAX_DISK_BYTES, DEFAULT_BUILD_TIMEOUT_MS, DEFAULT_STEP_TIMEOUT_MS } from '../templates/template-build.js';
import { removeUserTemplate } from '../templates/template-store.js';

/** A whole number option (MiB, seconds): at least 1, at most nine digits or `max`. */
function wholeNumber(unit: string, max = 999_999_999): (value: string) => string {
  return (value) => {
    if (!/^[1-9][0-9]{0,8}$/.test(value) || Number(value) > max) throw new InvalidArgumentError(`a whole number of ${unit}, from 1 to ${max}`);
    return value;
  };
}
/** A timer's longest delay is 2^31 - 1 ms (24.8 days); past it Node fires at once. */
const MAX_TIMEOUT_SECONDS = 2_000_000;

/**
 * `sbx template build|ls|rm`: works on the images directory directly (as root, like `sbx image
 * build`); a running orchestrator sees a new or rebuilt template at its next create.
 * `sandboxSubnet` (SBX_SUBNET, read by the entry point): the subnet the builds' downloads are
 * fenced from, as the orchestrator on this host leases its guests' addresses from it.
 */
export function templateCommand(defaultImagesDir: string, sandboxSubnet: string): Command {
  const command = new Command('template').description('user templates: build, list, remove (docs/templates.md)');
  const imagesDir = () => new Option('--images-dir <dir>').env('SBX_IMAGES_DIR').default(defaultImagesDir);

  command
    .command('build <file>')
    .description('build a template file (YAML or JSON) on its base; cached by a hash of its content and its base')
    .option('--force', 'rebuild even if this content was built before')
    .addOption(
      new Option('--max-disk-mib <mib>', "most of the host's disk the build may take; a step past it is stopped and the build fails")
        .env('SBX_TEMPLATE_BUILD_MAX_DISK_MIB')
        .default(String(DEFAULT_BUILD_MAX_DISK_BYTES / 1024 ** 2))
        .argParser(wholeNumber('MiB')),
    )
    .addOption(
      new Option(
        '--step-timeout-seconds <seconds>',
        'longest one command in the image (a run entry, an apt command) may run; past it, it is killed and the build fails',
      )
        .env('SBX_TEMPLATE_BUILD_STEP_TIMEOUT_SECONDS')
        .default(String(DEFAULT_STEP_TIMEOUT_MS / 1000))
        .argParser(wholeNumber('seconds', MAX_TIMEOUT_SECONDS)),
    )
    .addOption(
      new Option('--build-timeout-seconds <seconds>', 'longest the whole build may take; past it, what runs is killed and the build fails')
        .env('SBX_TEMPLATE_BUILD_TIMEOUT_SECONDS')
        .default(String(DEFAULT_BUILD_TIMEOUT_MS / 1000))
        .argParser(wholeNumber('seconds', MAX_TIMEOUT_SECONDS)),
    )
    .addOption(imagesDir())
    .action(async (file: string, opts: { force?: boolean; imagesDir: string; maxDiskMib: string; stepTimeoutSeconds: string; buildTimeoutSeconds: string }) => {
      const controller = new AbortController();
      // Ctrl-C: the running step is killed and the half-built template removed, then we exit.
      const onSignal = () => controller.abort();
      process.once('SIGINT', onSignal);
      process.once('SIGTERM', onSignal);
      try {
        const built = await buildTemplateFile(file, {
          catalogue: new TemplateCatalogue(opts.imagesDir),
          force: opts.force,
          maxDiskBytes: Number(opts.maxDiskMib) * 1024 ** 2,
          stepTimeoutMs: Number(opts.stepTimeoutSeconds) * 1000,
          buildTimeoutMs: Number(opts.buildTimeoutSeconds) * 1000,
          sandboxSubnets: [sandboxSubnet],
          signal: controller.signal,
          onProgress: (line) => console.error(line),
        });
        console.log(`${built.manifest.name} ${built.manifest.hash} ${built.image.dir}`);
      } finally {
        process.off('SIGINT', onSignal);
        process.off('SIGTERM', onSignal);
      }
      if (controller.signal.aborted) process.exit(130);
    });

  command
    .command('ls')
    .description('list built-in and user templates')
    .option('--json', 'print JSON')
    .addOption(imagesDir())
    .action(async (opts: { json?: boolean; imagesDir: string }) => {
      const templates = await new TemplateCatalogue(opts.imagesDir).list();
      if (opts.json) return console.log(JSON.stringify(templates, null, 2));
      console.log(['NAME', 'KIND', 'BASE', 'SIZE', 'SCREEN', 'BUILT AT'].join('\t'));
      for (const t of templates) {
        const size = t.sizeBytes === null ? '-' : `${(t.sizeBytes / 1e6).toFixed(0)}MB`;
        const screen = t.screen ? `${t.screen.width}x${t.screen.height}` : '-';
        console.log([t.name, t.kind, t.base ?? '-', t.built ? size : 'not built', screen, t.builtAt ?? '-'].join('\t'));
      }
    });

  command
    .command('rm <name>')
    .description('remove a user template (refused while a sandbox runs on it)')
    .addOption(imagesDir())
    .action(async (name: string, opts: { imagesDir: string }) => {
      const catalogue = new TemplateCatalogue(opts.imagesDir);
      if (catalogue.isBuiltIn(name)) throw new Error(`${name} is a built-in template; it cannot be removed`);
      if (!(await removeUserTemplate(opts.imagesDir, name))) throw new Error(`no user template called ${name}`);
      console.error(`removed template ${name}`);
    });
  return command;
}
