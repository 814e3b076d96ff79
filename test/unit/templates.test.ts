import assert from 'node:assert/strict';
import { mkdir, mkdtemp, rm, symlink, writeFile } from 'node:fs/promises';
import { execFileSync } from 'node:child_process';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { parseWarmPool, warmPoolSizes } from '../../src/sessions/settings.js';
import { TemplateCatalogue, UnknownTemplateError } from '../../src/templates/catalogue.js';
import { buildTemplateFile, templateHash } from '../../src/templates/template-build.js';
import { parseTemplate, TemplateFileError } from '../../src/templates/template-file.js';
import { readSources } from '../../src/templates/template-sources.js';

/** The problems a template text has, as the error lists them (or [] when it is fine). */
function problems(text: string): string[] {
  try {
    parseTemplate(text, 't.yaml');
    return [];
  } catch (err) {
    assert.ok(err instanceof TemplateFileError, String(err));
    return err.problems;
  }
}

describe('unit: template files', () => {
  it('reads YAML and JSON alike, with defaults', () => {
    const yaml = parseTemplate(
      'name: tools\nbase: minimal\npackages: [jq]\nfiles:\n  - {source: a.txt, target: /opt/a.txt}\nautostart: [[xterm, -title, hi]]\n',
    );
    assert.deepEqual(yaml, {
      name: 'tools',
      base: 'minimal',
      packages: ['jq'],
      files: [{ source: 'a.txt', target: '/opt/a.txt', mode: '0644', owner: 'root' }],
      run: [],
      env: {},
      autostart: [['xterm', '-title', 'hi']],
    });
    const json = parseTemplate(
      JSON.stringify({
        name: 'tools',
        base: 'minimal',
        packages: ['jq'],
        files: [{ source: 'a.txt', target: '/opt/a.txt' }],
        autostart: [['xterm', '-title', 'hi']],
      }),
    );
    assert.deepEqual(json, yaml);
  });

  it('a bad schema: unknown fields, wrong types, missing fields, each with its line', () => {
    assert.deepEqual(problems('name: tools\nbase: minimal\ncolour: red\n'), ['colour (line 3): is not a known field']);
    assert.deepEqual(problems('name: tools\n'), ['base (line 1): is required']);
    assert.match(problems('name: tools\nbase: minimal\npackages: jq\n')[0] ?? '', /^packages \(line 3\): must be array/);
    assert.match(problems('name: tools\nbase: minimal\nscreen: {width: 10, height: 768}\n')[0] ?? '', /^screen\.width \(line 3\): must be >= 320/);
    assert.match(problems('name: [unclosed\n')[0] ?? '', /^line \d+: /, 'a YAML syntax error names its line');
    assert.match(
      problems('{"name": "tools", "base": "minimal", "name": "again"}')[0] ?? '',
      /line 1: .*unique/i,
      'a duplicate key is an error, not a silent override',
    );
  });

  it('bad names: template names and env names are allow-listed, reserved env names refused', () => {
    assert.match(problems('name: Tools_1\nbase: minimal\n')[0] ?? '', /^name \(line 1\): "Tools_1" is not allowed/);
    assert.match(problems('name: ../etc\nbase: minimal\n')[0] ?? '', /^name \(line 1\)/);
    assert.match(problems('name: tools\nbase: "minimal; rm -rf /"\n')[0] ?? '', /^base \(line 2\)/);
    assert.match(problems('name: tools\nbase: tools\n')[0] ?? '', /base: a template cannot be its own base/);
    assert.match(problems('name: tools\nbase: minimal\nenv: {"A-B": x}\n')[0] ?? '', /^env \(line 3\): has a name that is not allowed \(A-B/);
    for (const reserved of ['PATH', 'LD_PRELOAD', 'BASH_ENV', 'HOME', 'DISPLAY']) {
      assert.match(problems(`name: tools\nbase: minimal\nenv: {${reserved}: x}\n`)[0] ?? '', new RegExp(`^env\\.${reserved}: reserved`));
    }
    assert.match(problems('name: tools\nbase: minimal\nenv: {A: "two\\nlines"}\n')[0] ?? '', /^env\.A \(line 3\)/, 'no newline can add a line to the env file');
  });

  it('bad package names: options, versions, separators and shell are refused', () => {
    for (const bad of ['-oDebug::pkgProblemResolver=1', 'jq=1.6', 'jq; rm -rf /', 'jq tree', 'JQ', '$(id)', 'a']) {
      const found = problems(`name: tools\nbase: minimal\npackages: [${JSON.stringify(bad)}]\n`);
      assert.match(found[0] ?? '', /^packages\[0\] \(line 3\): .* is not allowed/, `${bad}: ${found.join('; ')}`);
    }
    assert.deepEqual(problems('name: tools\nbase: minimal\npackages: [libreoffice-writer, g++, python3.11]\n'), []);
  });

  it('relative targets, dot segments and sources outside the template dir are refused', () => {
    const file = (source: string, target: string) =>
      problems(`name: tools\nbase: minimal\nfiles:\n  - source: ${JSON.stringify(source)}\n    target: ${JSON.stringify(target)}\n`);
    assert.match(file('a', 'etc/motd')[0] ?? '', /^files\[0\]\.target \(line 5\): "etc\/motd" is not allowed/);
    assert.match(file('a', '/etc/../root/.ssh/x')[0] ?? '', /^files\[0\]\.target/);
    assert.match(file('a', '/etc/./motd')[0] ?? '', /^files\[0\]\.target/);
    assert.match(file('a', '/')[0] ?? '', /^files\[0\]\.target/);
    assert.match(file('../secret', '/etc/motd')[0] ?? '', /^files\[0\]\.source: must be a path relative to the template file/);
    assert.match(file('/etc/shadow', '/etc/motd')[0] ?? '', /^files\[0\]\.source/);
    assert.match(problems('name: tools\nbase: minimal\nfiles: [{source: a, target: /a, mode: "4755"}]\n')[0] ?? '', /mode/, 'no setuid bit');
    assert.match(problems('name: tools\nbase: minimal\nfiles: [{source: a, target: /a, owner: nobody}]\n')[0] ?? '', /owner .*must be one of "user", "root"/);
    assert.match(problems('name: tools\nbase: minimal\nautostart: [["A=b", x]]\n')[0] ?? '', /^autostart\[0\]\[0\]/, 'argv[0] cannot be an env assignment');
    for (const reserved of [
      '/sbin/sandbox-init',
      '/etc/ssh/sshd_config',
      '/usr/local/bin/sbx-input',
      '/sandbox/config/authorized_keys',
      '/etc/sandbox/template/env',
    ]) {
      assert.match(file('a', reserved)[0] ?? '', /^files\[0\]\.target: .* is the orchestrator's own/, reserved);
    }
  });
});

describe('unit: template sources stay in the template directory', () => {
  let root: string;
  let dir: string;
  const file = () => path.join(dir, 't.yaml');
  const read = (source: string) =>
    readSources(file(), parseTemplate(`name: tools\nbase: minimal\nfiles: [{source: ${JSON.stringify(source)}, target: /a}]\n`, file()));
  before(async () => {
    // root/tpl is the template's directory; root/tpl-other and root/secret are outside it.
    root = await mkdtemp(path.join(os.tmpdir(), 'sbx-sources-'));
    dir = path.join(root, 'tpl');
    await mkdir(path.join(dir, 'sub', 'deeper'), { recursive: true });
    await mkdir(path.join(root, 'tpl-other'));
    await writeFile(path.join(dir, 'hello.txt'), 'inside\n');
    await writeFile(path.join(dir, 'sub', 'inner.txt'), 'inner\n');
    await writeFile(path.join(root, 'secret'), 'outside\n');
    await writeFile(path.join(root, 'tpl-other', 'x'), 'sibling\n');
    await symlink(path.join(root, 'secret'), path.join(dir, 'to-secret')); // absolute, out
    await symlink('../../secret', path.join(dir, 'sub', 'rel-secret')); // relative, out
    await symlink('..', path.join(dir, 'sub', 'deeper', 'up')); // a directory, still in
    await symlink(root, path.join(dir, 'rootlink')); // a directory, out
    await symlink('../tpl-other/x', path.join(dir, 'sibling')); // out, to a name sharing the prefix
    await symlink('hello.txt', path.join(dir, 'alias')); // in
    execFileSync('mkfifo', [path.join(dir, 'fifo')]);
  });
  after(async () => {
    await rm(root, { recursive: true, force: true });
  });

  it('nested dot segments: those that stay inside are read, those that climb out are refused when the file is read', async () => {
    assert.deepEqual(problems('name: tools\nbase: minimal\nfiles: [{source: "sub/../hello.txt", target: /a}]\n'), []);
    assert.equal((await read('sub/../hello.txt'))[0]?.toString(), 'inside\n');
    assert.equal((await read('sub/deeper/../../hello.txt'))[0]?.toString(), 'inside\n');
    for (const source of ['a/../../x', 'sub/../../secret', 'sub/deeper/../../../secret', './../secret', 'sub/./../../tpl-other/x']) {
      assert.match(
        problems(`name: tools\nbase: minimal\nfiles: [{source: ${JSON.stringify(source)}, target: /a}]\n`)[0] ?? '',
        /^files\[0\]\.source: must be a path relative to the template file, inside its directory/,
        source,
      );
    }
  });

  it('the realpath check: a symlink out (to a file, through a directory, to a sibling named like the directory) is refused; one that stays in is read', async () => {
    for (const source of ['to-secret', 'sub/rel-secret', 'rootlink/secret', 'sub/deeper/up/rel-secret', 'sibling']) {
      await assert.rejects(
        read(source),
        (err: unknown) => {
          assert.ok(err instanceof TemplateFileError, String(err));
          assert.match(err.message, new RegExp(`files\\[0\\]\\.source: ${source.replace(/[.]/g, '\\.')} leads outside ${dir.replace(/[.]/g, '\\.')}`));
          assert.doesNotMatch(err.message, /outside\n|sibling\n/, 'no byte of the file outside is quoted');
          return true;
        },
        source,
      );
    }
    assert.equal((await read('alias'))[0]?.toString(), 'inside\n');
    assert.equal((await read('sub/deeper/up/inner.txt'))[0]?.toString(), 'inner\n', 'a directory symlink that stays inside');
  });

  it('not a regular file (a directory, a FIFO that would block a read) or missing: refused at once, naming the field', async () => {
    await assert.rejects(read('sub'), /files\[0\]\.source: sub is not a regular file/);
    const started = Date.now();
    await assert.rejects(read('fifo'), /files\[0\]\.source: fifo is not a regular file/);
    assert.ok(Date.now() - started < 2000, 'the FIFO was not waited on');
    await assert.rejects(read('missing.txt'), /files\[0\]\.source: missing\.txt does not exist/);
  });
});

describe('unit: the template catalogue and the build before it starts', () => {
  let dir: string;
  before(async () => {
    dir = await mkdtemp(path.join(os.tmpdir(), 'sbx-templates-unit-'));
  });
  after(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  it('an unknown base is refused, naming the templates there are, before anything is built', async () => {
    const catalogue = new TemplateCatalogue(dir, [
      {
        name: 'minimal',
        description: 'test',
        find: async () => ({ hash: 'a'.repeat(16), dir, rootfs: dir, ext4: dir, kernel: dir, initrd: dir }),
        build: () => Promise.reject(new Error('no')),
      },
    ]);
    const file = path.join(dir, 'nobase.yaml');
    await writeFile(file, 'name: tools\nbase: desktop-xyz\n');
    await assert.rejects(buildTemplateFile(file, { catalogue, sandboxSubnets: [] }), (err: unknown) => {
      assert.ok(err instanceof TemplateFileError);
      assert.match(err.message, /base: unknown template "desktop-xyz" \(built-ins and built user templates: minimal\)/);
      return true;
    });
    await assert.rejects(catalogue.resolve('nope'), (err: unknown) => err instanceof UnknownTemplateError && /available: minimal/.test(err.message));
    await writeFile(file, 'name: minimal\nbase: minimal\n');
    await assert.rejects(buildTemplateFile(file, { catalogue, sandboxSubnets: [] }), /base: a template cannot be its own base/);
    await writeFile(file, 'name: tools\nbase: minimal\nfiles: [{source: missing.txt, target: /a}]\n');
    await assert.rejects(buildTemplateFile(file, { catalogue, sandboxSubnets: [] }), /files\[0\]\.source: missing\.txt does not exist/);
  });

  it('the cache key: content, every file byte and the base image change it; key order does not', () => {
    const def = parseTemplate('name: tools\nbase: minimal\npackages: [jq]\n');
    const same = parseTemplate('{"packages": ["jq"], "base": "minimal", "name": "tools"}');
    const hash = templateHash(def, 'b'.repeat(16), [Buffer.from('x')]);
    assert.equal(templateHash(same, 'b'.repeat(16), [Buffer.from('x')]), hash);
    assert.notEqual(templateHash(def, 'c'.repeat(16), [Buffer.from('x')]), hash, 'a rebuilt base');
    assert.notEqual(templateHash(def, 'b'.repeat(16), [Buffer.from('y')]), hash, 'a changed file');
    assert.notEqual(templateHash(parseTemplate('name: tools\nbase: minimal\npackages: [tree]\n'), 'b'.repeat(16), [Buffer.from('x')]), hash);
  });
});

describe('unit: SBX_WARM_POOL', () => {
  it('reads template:count pairs; SBX_WARM_POOL_SIZE is the default template count unless named', () => {
    assert.deepEqual(
      parseWarmPool('minimal:2, desktop:1'),
      new Map([
        ['minimal', 2],
        ['desktop', 1],
      ]),
    );
    assert.deepEqual(parseWarmPool(''), new Map());
    assert.throws(() => parseWarmPool('minimal'), /SBX_WARM_POOL: "minimal" is not template:count/);
    assert.throws(() => parseWarmPool('minimal:1,minimal:2'), /named twice/);
    assert.throws(() => parseWarmPool('minimal:65'), /between 0 and 64/);
    assert.deepEqual(
      warmPoolSizes({ warmPool: new Map([['tools', 1]]), warmPoolSize: 2 }, 'minimal'),
      new Map([
        ['tools', 1],
        ['minimal', 2],
      ]),
    );
    assert.deepEqual(warmPoolSizes({ warmPool: new Map([['minimal', 1]]), warmPoolSize: 2 }, 'minimal'), new Map([['minimal', 1]]));
  });
});
