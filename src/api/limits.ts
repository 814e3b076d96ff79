/**
 * Request body limits. The app-wide limit (1 MiB) fits the tool routes, whose inputs carry
 * text to type, shell commands and whole files for the editor. Routes whose bodies are a few
 * small fields get a far smaller one, so a hostile client's megabyte is refused by its
 * Content-Length, or after 64 KiB of a chunked body, instead of being read and parsed.
 * File uploads stream and count their own bytes (files.ts).
 */
export const APP_BODY_LIMIT_BYTES = 1024 * 1024;
export const SMALL_BODY_LIMIT_BYTES = 64 * 1024;
