import fc from 'fast-check';

/** One route of the OpenAPI document, with the field names its schemas declare. */
export interface RouteShape {
  method: string;
  /** e.g. /v1/sessions/{id}/actions */
  path: string;
  query: string[];
  body: string[];
}

/** A request the fuzzer sends, and how it was made (printed when it fails). */
export interface FuzzRequest {
  method: string;
  url: string;
  headers: Record<string, string>;
  body: string | undefined;
  note: string;
}

interface OpenApiOperation {
  parameters?: Array<{ name: string; in: string }>;
  requestBody?: { content?: Record<string, { schema?: { properties?: Record<string, unknown> } }> };
}

/** Routes and field names from /openapi.json, so new routes and fields are fuzzed as they come. */
export function routesOf(openapi: { paths: Record<string, Record<string, OpenApiOperation>> }): RouteShape[] {
  const routes: RouteShape[] = [];
  for (const [path, operations] of Object.entries(openapi.paths)) {
    for (const [method, op] of Object.entries(operations)) {
      const query = (op.parameters ?? []).filter((p) => p.in === 'query').map((p) => p.name);
      const content = Object.values(op.requestBody?.content ?? {})[0];
      routes.push({ method: method.toUpperCase(), path, query, body: Object.keys(content?.schema?.properties ?? {}) });
    }
  }
  return routes;
}

/** Numbers at the edges of what schemas allow (0, limits, floats, huge, negative). */
const edgeNumber = fc.oneof(
  fc.constantFrom(0, -0, 1, -1, 9, 10, 11, 64, 319, 320, 321, 3840, 3841, 86_400, 86_401, 100, 100.5, 2 ** 31, 2 ** 53, -(2 ** 53), 1e308, 5e-324, 0.1),
  fc.integer(),
  fc.double({ noNaN: true, noDefaultInfinity: true }),
);

/** Strings: short and unicode, control characters, paths, key names, and now and then huge. */
const anyString = fc.oneof(
  { weight: 6, arbitrary: fc.string({ unit: 'binary', maxLength: 40 }) },
  {
    weight: 3,
    arbitrary: fc.constantFrom(
      '',
      ' ',
      'auto',
      'none',
      'true',
      'left_click',
      'screenshot',
      'cursor_position',
      'Return',
      'ctrl+alt+Delete',
      '/tmp/x',
      '../../etc/passwd',
      '/dev/zero',
      '/',
      'view',
      'create',
      '\u0000',
      '😀'.repeat(20),
      '\ud800',
      '%00',
      '{}',
      'null',
    ),
  },
  { weight: 1, arbitrary: fc.integer({ min: 10_000, max: 200_000 }).map((n) => 'é'.repeat(n)) },
);

/** A random JSON value of any type, scalars favoured, nested junk sometimes. */
const anyValue: fc.Arbitrary<unknown> = fc.letrec<{ value: unknown }>((tie) => ({
  value: fc.oneof(
    { depthSize: 'small', withCrossShrink: true },
    edgeNumber,
    anyString,
    fc.boolean(),
    fc.constant(null),
    fc.array(tie('value'), { maxLength: 5 }),
    fc.dictionary(fc.string({ maxLength: 8 }), tie('value'), { maxKeys: 5 }),
  ),
})).value;

/** A body for a route: its declared fields with random values, missing ones and extras. */
function objectBody(fields: string[]): fc.Arbitrary<Record<string, unknown>> {
  const declared = fields.length ? fc.subarray(fields) : fc.constant([] as string[]);
  return fc
    .tuple(
      declared,
      fc.array(anyValue, { minLength: fields.length, maxLength: fields.length }),
      fc.dictionary(fc.string({ maxLength: 12 }), anyValue, { maxKeys: 3 }),
    )
    .map(([names, values, extra]) => {
      const body: Record<string, unknown> = {};
      names.forEach((name, i) => (body[name] = values[i]));
      // Extras first, declared fields win: a random key may shadow nothing we meant to send.
      return { ...extra, ...body };
    });
}

type BodyKind = { kind: 'json'; value: unknown } | { kind: 'raw'; text: string; contentType: string | undefined };

function bodyFor(route: RouteShape): fc.Arbitrary<BodyKind> {
  return fc.oneof(
    { weight: 8, arbitrary: objectBody(route.body).map((value): BodyKind => ({ kind: 'json', value })) },
    { weight: 2, arbitrary: anyValue.map((value): BodyKind => ({ kind: 'json', value })) },
    {
      weight: 1,
      arbitrary: fc
        .tuple(
          fc.constantFrom('{', '{"action":', '[1,2', '{"a":1}}', 'nul', '\u0000', '{"x":"\ud800"}', '"\\uZZZZ"', '{}'.padStart(5000, '['), ''),
          fc.constantFrom('application/json', 'application/json; charset=latin1'),
        )
        .map(([text, contentType]): BodyKind => ({ kind: 'raw', text, contentType })),
    },
    {
      weight: 1,
      arbitrary: fc
        .tuple(
          fc.string({ maxLength: 60 }),
          fc.constantFrom(
            'text/plain',
            'application/x-www-form-urlencoded',
            'multipart/form-data; boundary=x',
            'application/xml',
            undefined,
            'application/octet-stream',
          ),
        )
        .map(([text, contentType]): BodyKind => ({ kind: 'raw', text, contentType })),
    },
  );
}

function queryFor(route: RouteShape): fc.Arbitrary<string> {
  const names = [...route.query, 'extra', 'path', 'scaled', 'screenshot'];
  return fc
    .dictionary(
      fc.constantFrom(...names),
      fc.oneof(
        anyString.filter((s) => s.length < 5000),
        edgeNumber.map(String),
      ),
      { maxKeys: 3 },
    )
    .map((query) => {
      const params = new URLSearchParams();
      for (const [key, value] of Object.entries(query)) params.append(key, value);
      const text = params.toString();
      return text ? `?${text}` : '';
    });
}

/**
 * Requests for the routes: the real session's id mostly, now and then a malformed or unknown
 * one; bodies of every kind for every method (a GET with a body too).
 */
export function requestArbitrary(routes: RouteShape[], sessionId: string, idSafe: (route: RouteShape) => boolean): fc.Arbitrary<FuzzRequest> {
  const randomId = fc.oneof(fc.stringMatching(/^[a-z0-9]{10}$/), fc.string({ maxLength: 80 }), fc.constantFrom('..', '%2e%2e', 'a'.repeat(65), '%00'));
  return fc.constantFrom(...routes).chain((route) =>
    fc
      .record({
        id: idSafe(route) ? fc.oneof({ weight: 9, arbitrary: fc.constant(sessionId) }, { weight: 1, arbitrary: randomId }) : randomId,
        query: queryFor(route),
        body: fc.option(bodyFor(route), { freq: 4, nil: undefined }),
      })
      .map(({ id, query, body }): FuzzRequest => {
        const url = route.path.replace('{id}', encodeURIComponent(id)) + query;
        const headers: Record<string, string> = {};
        let payload: string | undefined;
        if (body?.kind === 'json') {
          headers['content-type'] = 'application/json';
          payload = JSON.stringify(body.value) ?? 'null';
        } else if (body?.kind === 'raw') {
          if (body.contentType) headers['content-type'] = body.contentType;
          payload = body.text;
        }
        const method = route.method;
        // fetch refuses a body on GET and HEAD: those go without one.
        const withBody = method !== 'GET' && method !== 'HEAD' ? payload : undefined;
        if (withBody === undefined) delete headers['content-type'];
        return { method, url, headers, body: withBody, note: `${method} ${route.path}` };
      }),
  );
}
