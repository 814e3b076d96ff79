import type { FastifyInstance } from 'fastify';
import type { TemplateInfo } from '../../templates/catalogue.js';

/** What GET /v1/templates reads: the TemplateCatalogue. */
export interface TemplateListing {
  list(): Promise<TemplateInfo[]>;
}

const screen = {
  type: ['object', 'null'],
  required: ['width', 'height'],
  properties: { width: { type: 'integer' }, height: { type: 'integer' } },
} as const;

/** A template as GET /v1/templates lists it (the client's TemplateInfo is generated from it). */
export const templateSchema = {
  type: 'object',
  required: ['name', 'kind', 'base', 'built', 'sizeBytes', 'builtAt', 'screen'],
  properties: {
    name: { type: 'string' },
    kind: { type: 'string', enum: ['built-in', 'user'] },
    base: { type: ['string', 'null'], description: 'The template it was built on (null for built-ins)' },
    built: { type: 'boolean', description: 'Only built templates can be booted' },
    sizeBytes: { type: ['integer', 'null'], description: 'Its root filesystem, in bytes' },
    builtAt: { type: ['string', 'null'], format: 'date-time' },
    screen: { ...screen, description: "Its sessions' default screen (null: 1024x768)" },
  },
} as const;

/** /v1/templates: the templates a session can name (built with `sbx template build`). */
export async function templateRoutes(app: FastifyInstance, opts: { templates: TemplateListing }): Promise<void> {
  app.get(
    '/v1/templates',
    {
      schema: {
        summary: 'List the built-in and user templates a session can boot',
        tags: ['templates'],
        response: {
          200: {
            type: 'object',
            required: ['templates'],
            properties: {
              templates: {
                type: 'array',
                items: templateSchema,
              },
            },
          },
          401: { $ref: 'Error#' },
        },
      },
    },
    async () => ({ templates: await opts.templates.list() }),
  );
}
