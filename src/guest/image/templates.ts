/**
 * The built-in templates: a name for each guest recipe the builder knows. Sessions, the CLI
 * and the settings refer to images by these names; builtInRecipe() and imageFor() are the
 * one place a name becomes a recipe, and an image (user-defined templates extend them).
 */
import { DESKTOP_RECIPE } from './desktop-recipe.js';
import { findImage, type GuestImage } from './image-store.js';
import { MINIMAL_RECIPE, type GuestRecipe } from './recipe.js';
import { XFCE_RECIPE } from './xfce-recipe.js';

export const BUILT_IN_TEMPLATES = {
  /** Xvfb, openbox, one xterm: fast, for tests and headless work. */
  minimal: MINIMAL_RECIPE,
  /** A desktop to work on: panel, Firefox ESR, LibreOffice, file manager, editor, viewers. */
  desktop: DESKTOP_RECIPE,
  /** Debian's XFCE on display :0, started by the session (E2B Desktop's SDK), not by our init. */
  xfce: XFCE_RECIPE,
} as const satisfies Record<string, GuestRecipe>;

export type BuiltInTemplateName = keyof typeof BUILT_IN_TEMPLATES;

export const BUILT_IN_TEMPLATE_NAMES = Object.keys(BUILT_IN_TEMPLATES) as BuiltInTemplateName[];

/** The template of new sessions unless configured otherwise (SBX_TEMPLATE). */
export const DEFAULT_TEMPLATE: BuiltInTemplateName = 'desktop';

export function isBuiltInTemplate(name: string): name is BuiltInTemplateName {
  return Object.hasOwn(BUILT_IN_TEMPLATES, name);
}

/** The recipe of a built-in template; an unknown name throws, listing the known ones. */
export function builtInRecipe(name: string): GuestRecipe {
  if (!isBuiltInTemplate(name)) {
    throw new Error(`unknown template "${name}": the built-in templates are ${BUILT_IN_TEMPLATE_NAMES.join(', ')}`);
  }
  return BUILT_IN_TEMPLATES[name];
}

/** The built image of a template, if it has been built (`sbx image build --template <name>`). */
export function imageFor(imagesDir: string, templateName: string): Promise<GuestImage | undefined> {
  return findImage(imagesDir, builtInRecipe(templateName));
}
