import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { describe, it } from 'node:test';
import { CLIENT_TYPES_FILE, clientTypesSource } from '../../scripts/generate-client-types.js';
import type { RecordingStatus as ClientRecordingStatus, SessionInfo, TemplateInfo } from '../../src/client/index.js';
import type { RecordingStatus } from '../../src/recording/session-recorder.js';
import type { SessionView } from '../../src/sessions/session-view.js';
import type { TemplateInfo as ServerTemplateInfo } from '../../src/templates/catalogue.js';

/**
 * The client SDK's types of sessions, templates, action results and request bodies are
 * generated from the server's JSON schemas (scripts/generate-client-types.ts): the file in
 * src/client/ must be what the generator writes today, and what the server builds must fit
 * what the schemas promise (checked by the type check, below).
 */

// What the server's own types build is what the generated types describe: a field the server
// adds, renames or makes optional without its schema fails the type check here.
const sessionFits = (view: SessionView): SessionInfo => view;
const templateFits = (info: ServerTemplateInfo): TemplateInfo => info;
const recordingFits = (status: RecordingStatus): ClientRecordingStatus => status;

describe('client types generated from the server schemas', () => {
  it('src/client/api-types.ts is what `npm run gen:client-types` writes', () => {
    assert.equal(readFileSync(CLIENT_TYPES_FILE, 'utf8'), clientTypesSource(), 'stale: run `npm run gen:client-types` and commit the result');
  });

  it('the generated file imports nothing (the client imports no server code)', () => {
    assert.doesNotMatch(readFileSync(CLIENT_TYPES_FILE, 'utf8'), /^\s*(import|export\s.*\sfrom)\s/m);
    assert.equal(typeof sessionFits, 'function');
    assert.equal(typeof templateFits, 'function');
    assert.equal(typeof recordingFits, 'function');
  });
});
