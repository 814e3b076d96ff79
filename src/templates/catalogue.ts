/**
 * Every template a session can name: the built-ins (a recipe each, built by the image
 * builder) and the user templates built with `sbx template build` (template-store.ts).
 * Built-ins go in BUILT_IN_TEMPLATES; a user template cannot take a built-in's name.
 */
import { readFile, stat } from 'node:fs/promises';
import { join } from 'node:path';
import { buildImage, type GuestImage, type ImageManifest } from '../guest/image/builder.js';
import { BUILT_IN_TEMPLATE_NAMES, builtInRecipe, imageFor, isBuiltInTemplate, type BuiltInTemplateName } from '../guest/image/templates.js';
import { findUserTemplate, listUserTemplates } from './template-store.js';

/** A template built from one of our recipes. */
export interface BuiltInTemplate {
  name: string;
  description: string;
  /** Its image, if built. */
  find(imagesDir: string): Promise<GuestImage | undefined>;
  /** Builds its image (or returns the cached one). */
  build(imagesDir: string, onProgress: (line: string) => void): Promise<GuestImage>;
}

const DESCRIPTIONS: Record<BuiltInTemplateName, string> = {
  minimal: 'Xvfb, openbox and an xterm: fast, for tests and headless work',
  desktop: 'a panel, Firefox ESR, LibreOffice Writer and Calc, a file manager, an editor, viewers',
  xfce: "Debian's XFCE on display :0, started by the session (E2B Desktop's SDK), with Mousepad and a terminal",
};

/** One per recipe of guest/image/templates.ts. */
export const BUILT_IN_TEMPLATES: readonly BuiltInTemplate[] = BUILT_IN_TEMPLATE_NAMES.map((name) => ({
  name,
  description: DESCRIPTIONS[name],
  find: (imagesDir: string) => imageFor(imagesDir, name),
  build: (imagesDir: string, onProgress: (line: string) => void) => buildImage({ imagesDir, recipe: builtInRecipe(name), onProgress }),
}));

/** A template as GET /v1/templates and `sbx template ls` show it. */
export interface TemplateInfo {
  name: string;
  kind: 'built-in' | 'user';
  /** The template it was built on (null for built-ins). */
  base: string | null;
  /** Whether its image is built (sessions can use only built ones). */
  built: boolean;
  /** Its root filesystem's size in bytes (null until built). */
  sizeBytes: number | null;
  builtAt: string | null;
  /** The screen its sessions get unless they ask for another (null: the orchestrator's default). */
  screen: { width: number; height: number } | null;
}

/** A template a session can boot: its image and its default screen. */
export interface ResolvedTemplate {
  name: string;
  image: GuestImage;
  screen?: { width: number; height: number };
}

/** Unknown template: the message lists what exists (the API answers 400 with it). */
export class UnknownTemplateError extends Error {
  constructor(
    readonly requested: string,
    readonly available: readonly string[],
  ) {
    super(`unknown template "${requested}"; available: ${available.join(', ') || 'none'}`);
    this.name = 'UnknownTemplateError';
  }
}

export class TemplateCatalogue {
  constructor(
    readonly imagesDir: string,
    private readonly builtIns: readonly BuiltInTemplate[] = BUILT_IN_TEMPLATES,
  ) {}

  isBuiltIn(name: string): boolean {
    return this.builtIns.some((t) => t.name === name);
  }

  /** The built template called `name`, or UnknownTemplateError listing the usable names. */
  async resolve(name: string): Promise<ResolvedTemplate> {
    const builtIn = this.builtIns.find((t) => t.name === name);
    if (builtIn) {
      const image = await builtIn.find(this.imagesDir);
      // A template whose programs start the display (xfce) defaults to the screen they make.
      if (image) return { name, image, ...(image.display ? { screen: image.display.screen } : {}) };
    } else if (/^[a-z][a-z0-9-]{0,39}$/.test(name)) {
      const user = await findUserTemplate(this.imagesDir, name);
      if (user) {
        // A template built on one whose X server the session starts (xfce) is such a template too.
        const display = isBuiltInTemplate(user.manifest.base) ? builtInRecipe(user.manifest.base).display : undefined;
        const image = display ? { ...user.image, display } : user.image;
        const screen = user.manifest.definition.screen ?? display?.screen;
        return { name, image, ...(screen ? { screen } : {}) };
      }
    }
    throw new UnknownTemplateError(
      name,
      (await this.list()).filter((t) => t.built).map((t) => t.name),
    );
  }

  /** The built-in's image, built now if missing (start-up, `sbx image build`). */
  async ensureBuiltIn(name: string, onProgress: (line: string) => void): Promise<GuestImage> {
    const builtIn = this.builtIns.find((t) => t.name === name);
    if (!builtIn) throw new Error(`${name} is not a built-in template`);
    return (await builtIn.find(this.imagesDir)) ?? builtIn.build(this.imagesDir, onProgress);
  }

  async list(): Promise<TemplateInfo[]> {
    const infos: TemplateInfo[] = [];
    for (const builtIn of this.builtIns) {
      const image = await builtIn.find(this.imagesDir);
      const manifest = image ? await readManifest(image.dir) : undefined;
      infos.push({
        name: builtIn.name,
        kind: 'built-in',
        base: null,
        built: image !== undefined,
        sizeBytes: manifest?.rootfsBytes ?? null,
        builtAt: manifest?.builtAt ?? (image ? (await stat(image.dir)).mtime.toISOString() : null),
        screen: null,
      });
    }
    for (const user of await listUserTemplates(this.imagesDir)) {
      const { manifest } = user;
      infos.push({
        name: manifest.name,
        kind: 'user',
        base: manifest.base,
        built: true,
        sizeBytes: manifest.rootfsBytes,
        builtAt: manifest.builtAt,
        screen: manifest.definition.screen ?? null,
      });
    }
    return infos;
  }
}

async function readManifest(dir: string): Promise<ImageManifest | undefined> {
  try {
    return JSON.parse(await readFile(join(dir, 'manifest.json'), 'utf8')) as ImageManifest;
  } catch {
    return undefined;
  }
}
