/**
 * `attachment` with the file's name, safe whatever the name holds: a plain-ASCII fallback
 * (quotes, backslashes, controls and non-ASCII replaced by "_") for old clients, and the
 * exact name as RFC 8187 UTF-8 (`filename*`) for the rest. No byte of the name can end the
 * header or the quoted string early.
 */
export function attachmentDisposition(name: string): string {
  const fallback = name.replace(/[^\x20-\x7e]|["\\]/gu, '_') || 'download';
  let exact: string;
  try {
    exact = encodeURIComponent(name).replace(/['()*]/g, (c) => `%${c.charCodeAt(0).toString(16).toUpperCase()}`);
  } catch {
    return `attachment; filename="${fallback}"`; // a lone surrogate has no UTF-8 form
  }
  return `attachment; filename="${fallback}"; filename*=UTF-8''${exact}`;
}
