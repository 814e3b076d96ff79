import type { GuestImage } from '../guest/image/image-store.js';

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
