import type { GuestImage } from '../guest/image/image-store.js';
import type { TemplateDisplay } from '../guest/image/recipe.js';
import { builtInRecipe, isBuiltInTemplate } from '../guest/image/templates.js';

/**
 * The display a built-in template's sessions start themselves (xfce), by its name: for a
 * session whose image is not at hand (adopted after a restart). A user template built on xfce
 * is known by its image (catalogue.ts) when it boots.
 */
export function templateDisplay(name: string): TemplateDisplay | undefined {
  return isBuiltInTemplate(name) ? builtInRecipe(name).display : undefined;
}

/** A template resolved for a session: the image to boot and its default screen. */
export interface SessionTemplate {
  name: string;
  image: GuestImage;
  screen?: { width: number; height: number };
}

/**
 * Where the session layer finds a template's image (the TemplateCatalogue, or a fake in unit
 * tests). An unknown name rejects with a message listing the names that exist.
 */
export interface TemplateSource {
  resolve(name: string): Promise<SessionTemplate>;
}
