import { InvalidRequestError } from '../errors.js';

/** One part of a multipart/form-data body. */
export interface FormPart {
  name: string;
  filename: string | undefined;
  data: Buffer;
}

/** Parts one upload may carry (the SDK's files.write of several files sends one part each). */
export const MAX_PARTS = 64;

/** The boundary of a multipart/form-data content type, or undefined for another type. */
export function multipartBoundary(contentType: string | undefined): string | undefined {
  if (!contentType || !/^multipart\/form-data\b/i.test(contentType)) return undefined;
  const match = /;\s*boundary=(?:"([^"]{1,70})"|([^;\s]{1,70}))/i.exec(contentType);
  return match?.[1] ?? match?.[2];
}

/**
 * Splits a buffered multipart/form-data body (RFC 7578) into its parts: the headers of each
 * are read for its name and filename only, the data kept as bytes. The body was capped before
 * it came here; a body that does not follow the format is a 400.
 */
export function parseMultipart(body: Buffer, boundary: string): FormPart[] {
  const delimiter = Buffer.from(`--${boundary}`);
  const parts: FormPart[] = [];
  let at = body.indexOf(delimiter);
  if (at < 0) throw new InvalidRequestError('the multipart body has no part');
  for (;;) {
    at += delimiter.length;
    if (body.subarray(at, at + 2).toString() === '--') return parts;
    if (body.subarray(at, at + 2).toString() !== '\r\n') throw new InvalidRequestError('the multipart body is malformed');
    const headEnd = body.indexOf('\r\n\r\n', at);
    if (headEnd < 0) throw new InvalidRequestError('a multipart part has no end of headers');
    const head = body.subarray(at + 2, headEnd).toString('utf8');
    const next = body.indexOf(Buffer.concat([Buffer.from('\r\n'), delimiter]), headEnd + 4);
    if (next < 0) throw new InvalidRequestError('a multipart part has no end');
    const disposition = /^content-disposition:\s*form-data(.*)$/im.exec(head)?.[1] ?? '';
    const name = /;\s*name="([^"]*)"/i.exec(disposition)?.[1];
    const filename = /;\s*filename="([^"]*)"/i.exec(disposition)?.[1];
    if (name === undefined) throw new InvalidRequestError('a multipart part has no name');
    parts.push({ name, filename, data: body.subarray(headEnd + 4, next) });
    if (parts.length > MAX_PARTS) throw new InvalidRequestError(`a multipart body may carry at most ${MAX_PARTS} parts`);
    at = next + 2;
  }
}
