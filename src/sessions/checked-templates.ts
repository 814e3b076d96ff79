import type { Logger } from 'pino';
import { checkImage, type ImageCheck } from '../guest/image/image-integrity.js';
import type { GuestImage } from '../guest/image/image-store.js';
import type { SessionTemplate, TemplateSource } from './templates.js';

/**
 * The templates sessions boot, each image checked for damage before its first use in this
 * process (image-integrity.ts): the start-up checks the default template's and the warm
 * pools' (a damaged one stops the start), and a create naming another template checks its
 * image then. A damaged image is refused (503 image_damaged, with what to run), never used;
 * a check that passed is not repeated (one in progress is shared by concurrent creates).
 */
export class CheckedTemplates implements TemplateSource {
  private readonly passed = new Map<string, Promise<ImageCheck>>();

  constructor(
    private readonly source: TemplateSource,
    /** What to run to rebuild a template's image, for the message. */
    private readonly rebuildHint: (template: string) => string,
    private readonly log: Logger,
  ) {}

  async resolve(name: string): Promise<SessionTemplate> {
    const template = await this.source.resolve(name);
    await this.check(name, template.image);
    return template;
  }

  check(template: string, image: GuestImage): Promise<ImageCheck> {
    const key = `${image.dir}\0${image.hash}`;
    let check = this.passed.get(key);
    if (!check) {
      check = checkImage(image, this.rebuildHint(template)).then(
        (result) => {
          if (result.indexed)
            this.log.info({ template, image: image.dir, entries: result.entries, ms: result.ms }, 'guest image checked against its content index');
          else
            this.log.warn(
              { template, image: image.dir, ms: result.ms, rebuild: this.rebuildHint(template) },
              'guest image has no content index (built before there was one, or a user template): only its guest init and guest files were checked',
            );
          return result;
        },
        (err: unknown) => {
          this.passed.delete(key); // a rebuilt image is checked again
          this.log.error({ err, template, image: image.dir }, 'guest image refused: it is damaged');
          throw err;
        },
      );
      this.passed.set(key, check);
    }
    return check;
  }
}
