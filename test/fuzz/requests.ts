/**
 * The generated requests: fast-check arbitraries for keys, bodies and methods,
 * the resolution of a scenario into concrete requests, and their bytes.
 */
import fc from 'fast-check';
import { METHODS } from 'node:http';
import { FUZZ_ROUTES } from './fuzz.module.js';
import {
  keyHeaderLine,
  readKey,
  sfQuote,
  type BodySpec,
  type Framing,
  type KeyHeader,
  type KeyReading,
} from './oracle.js';

/** Categories of generated keys that stand on their own. */
export type FreshKeyCategory =
  | 'valid' // 1-255 visible ASCII
  | 'valid-edge' // exactly 1 or 255 characters, or a UUID
  | 'padded' // a valid key with leading/trailing spaces or tabs
  | 'quoted' // sf-strings: valid, escaped, unterminated, bad escapes...
  | 'comma' // commas, with and without spaces
  | 'empty'
  | 'whitespace'
  | 'control' // control characters \x00-\x1f and DEL
  | 'unicode' // non-ASCII: accents, emoji, RTL, BOM, NUL...
  | 'long' // 256 characters to 10 KiB, token or quoted
  | 'repeated' // two to five key headers in one request
  | 'missing' // no key header at all
  | 'lookalike'; // no key header, but near-miss names (`Idempotency_Key`)

/** Categories of keys taken from an earlier request of the scenario. */
export type DupKeyCategory =
  | 'dup-same' // same key, method, path and body: a replay
  | 'dup-quoted' // the same, key sent as an sf-string
  | 'dup-padded' // the same, key with surrounding whitespace
  | 'dup-body' // same key, method and route, another body: 422 unless equal
  | 'dup-method'; // same key, any method, route and body

export type KeyCategory = FreshKeyCategory | DupKeyCategory;

export type KeySpec =
  | {
      readonly category: FreshKeyCategory;
      readonly headers: readonly KeyHeader[];
      /** Headers with names close to the key header's. */
      readonly decoys: readonly string[];
    }
  | {
      readonly category: DupKeyCategory;
      /** Which earlier request with a valid key (modulo their number). */
      readonly ref: number;
      readonly name: string;
      /** Sent in the same parallel wave as the request it copies. */
      readonly race: boolean;
      /** Used when no earlier request of the scenario has a valid key. */
      readonly fallback: string;
    };

/** One generated request, before resolution. */
export interface RequestSpec {
  readonly method: string;
  /** `auto`: the route of a routed method; otherwise a path shape. */
  readonly target: 'auto' | 'collection' | 'member' | 'unknown';
  readonly id: string;
  readonly query: string;
  readonly key: KeySpec;
  readonly body: BodySpec;
}

/** A request of a scenario, resolved: everything needed to send and judge it. */
export interface PlannedRequest {
  readonly index: number;
  readonly category: KeyCategory;
  readonly method: string;
  readonly path: string;
  /** Route template of the decorated handler it reaches, if any. */
  readonly template: string | undefined;
  readonly keyHeaders: readonly KeyHeader[];
  readonly decoys: readonly string[];
  readonly body: BodySpec;
  readonly reading: KeyReading;
  /** Index of the request whose key it reuses. */
  readonly ref: number | undefined;
  readonly race: boolean;
}

// ---------------------------------------------------------------- keys

const char = (min: number, max: number) =>
  fc.integer({ min, max }).map((code) => String.fromCharCode(code));
/** Visible ASCII, 0x21-0x7e: the default key alphabet. */
const visible = char(0x21, 0x7e);
/** Visible ASCII without `"` (a leading quote makes an sf-string). */
const visibleNoQuote = visible.filter((c) => c !== '"');
/** Visible ASCII without `:` (a split line must never look like a header). */
const visibleNoColon = visible.filter((c) => c !== ':');

const validKey = fc
  .tuple(
    visibleNoQuote,
    fc.string({ unit: visible, minLength: 0, maxLength: 254 }),
  )
  .map(([first, rest]) => first + rest);

const validEdgeKey = fc.oneof(
  visibleNoQuote,
  fc.string({ unit: visibleNoQuote, minLength: 255, maxLength: 255 }),
  fc.uuid(),
);

const ows = fc.string({ unit: fc.constantFrom(' ', '\t'), maxLength: 4 });

const paddedKey = fc
  .tuple(ows, validKey, ows)
  .filter(([before, , after]) => before.length + after.length > 0)
  .map(([before, key, after]) => before + key + after);

const quotedKey = fc.oneof(
  validKey.map(sfQuote),
  fc.constantFrom(
    '""',
    '"abc"',
    '"a\\"b"',
    '"a\\\\b"',
    '"\\""',
    '"unterminated',
    '"',
    '"a\\',
    '"a\\nb"',
    '"a\\tb"',
    '"a"b',
    '"a""b"',
    '"a b"',
    '" abc"',
    '"é"',
    "'single'",
    '"abc" ',
    '"a\\"',
  ),
  fc.string({ unit: char(0x20, 0x7e), maxLength: 40 }).map((s) => `"${s}`),
  fc.string({ unit: char(0x20, 0x7e), maxLength: 40 }).map((s) => `"${s}"`),
);

const commaKey = fc.oneof(
  fc
    .tuple(validKey, validKey)
    .map(([a, b]) => `${a.slice(0, 100)},${b.slice(0, 100)}`),
  fc
    .tuple(validKey, validKey)
    .map(([a, b]) => `${a.slice(0, 100)}, ${b.slice(0, 100)}`),
  fc.constantFrom(',', ',,', ', ,', 'a,', ',a', '"a","b"', '"a", "b"', 'a;b=1'),
);

const whitespaceKey = fc.string({
  unit: fc.constantFrom(' ', '\t'),
  minLength: 1,
  maxLength: 12,
});

/** A control character; CRLF pairs are left out (they split the header). */
const control = fc.oneof(char(0x00, 0x1f), fc.constant('\x7f'));

const controlKey = fc
  .tuple(
    fc.string({ unit: visibleNoColon, maxLength: 20 }),
    fc.array(control, { minLength: 1, maxLength: 3 }),
    fc.string({ unit: visibleNoColon, maxLength: 20 }),
  )
  .map(([before, controls, after]) => before + controls.join('') + after)
  .filter((value) => !value.includes('\r\n'));

const nonAscii = (value: string) =>
  [...value].some((c) => c.charCodeAt(0) > 0x7f);

const UNICODE_PIECES = [
  'é',
  'ü',
  'ß',
  'Ω',
  'ж',
  '中文',
  'キー',
  '😀',
  '👍🏽',
  '👨‍👩‍👧',
  '🏳️‍🌈',
  '\u202e', // RIGHT-TO-LEFT OVERRIDE
  '\u200f', // RIGHT-TO-LEFT MARK
  '\u200b', // ZERO WIDTH SPACE
  'שלום',
  'مرحبا',
  '\u0000',
  '\ufeff', // BOM
  '\u00a0', // NO-BREAK SPACE
  '\u2028',
  'ｋｅｙ', // fullwidth
  'e\u0301', // combining accent
  '\u00ff',
  '\ud800', // lone surrogate (sent as U+FFFD)
];

const unicodeKey = fc.oneof(
  fc
    .array(
      fc.oneof(
        fc.constantFrom(...UNICODE_PIECES),
        fc.string({ unit: visibleNoColon, minLength: 1, maxLength: 6 }),
      ),
      { minLength: 1, maxLength: 8 },
    )
    .map((parts) => parts.join(''))
    .filter((value) => nonAscii(value)),
  fc
    .string({ unit: 'grapheme', minLength: 1, maxLength: 20 })
    .filter((value) => nonAscii(value) && !value.includes('\r\n')),
  fc
    .string({ unit: 'binary', minLength: 1, maxLength: 20 })
    .filter((value) => nonAscii(value) && !value.includes('\r\n')),
);

const longKey = fc
  .tuple(
    fc.integer({ min: 256, max: 10 * 1024 }),
    fc.string({ unit: visibleNoQuote, minLength: 1, maxLength: 16 }),
    fc.constantFrom('token', 'quoted', 'quoted-255'),
  )
  .map(([length, seed, form]) => {
    const text = seed.repeat(Math.ceil(length / seed.length)).slice(0, length);
    if (form === 'token') {
      return text;
    }
    // A valid key of 255 characters, quoted: 257 characters on the wire.
    return form === 'quoted' ? sfQuote(text) : sfQuote(text.slice(0, 255));
  });

const keyName = fc.mixedCase(fc.constant('idempotency-key'));

const framing: fc.Arbitrary<Framing> = fc.oneof(
  { weight: 20, arbitrary: fc.constant('normal' as const) },
  { weight: 1, arbitrary: fc.constant('no-space' as const) },
  { weight: 1, arbitrary: fc.constant('tab' as const) },
  { weight: 1, arbitrary: fc.constant('space-before-colon' as const) },
  { weight: 1, arbitrary: fc.constant('obs-fold' as const) },
);

const single = (category: FreshKeyCategory, value: fc.Arbitrary<string>) =>
  fc
    .record({ name: keyName, value, framing })
    .map((header): KeySpec => ({ category, headers: [header], decoys: [] }));

/** A short key of any kind, for repeated headers (kept under 16 KiB of headers). */
const shortAnyKey = fc.oneof(
  { weight: 4, arbitrary: validKey.map((k) => k.slice(0, 64)) },
  { weight: 1, arbitrary: quotedKey },
  { weight: 1, arbitrary: fc.constantFrom('', ' ', 'same', 'same') },
  { weight: 1, arbitrary: unicodeKey },
);

const repeatedKey = fc
  .tuple(
    fc.array(
      fc.record({
        name: keyName,
        value: shortAnyKey,
        framing: fc.constant('normal' as const),
      }),
      { minLength: 2, maxLength: 5 },
    ),
    fc.boolean(),
  )
  .map(([headers, identical]): KeySpec => {
    // Often the very same value twice: still two headers, still refused.
    const copied = identical
      ? headers.map((h) => ({ ...h, value: headers[0].value }))
      : headers;
    return { category: 'repeated', headers: copied, decoys: [] };
  });

const lookalikeKey = fc
  .array(
    fc.constantFrom(
      'Idempotency_Key',
      'IdempotencyKey',
      'X-Idempotency-Key',
      'Idempotency-Keys',
      'Idempotency-Key-',
      'Idempotency',
      'Idempotent-Replayed',
    ),
    { minLength: 1, maxLength: 3 },
  )
  .map((decoys): KeySpec => ({ category: 'lookalike', headers: [], decoys }));

const dupKey = fc
  .record({
    category: fc.constantFrom<DupKeyCategory>(
      'dup-same',
      'dup-same',
      'dup-quoted',
      'dup-padded',
      'dup-body',
      'dup-body',
      'dup-method',
    ),
    ref: fc.nat(),
    name: keyName,
    race: fc.boolean(),
    fallback: validKey,
  })
  .map((spec): KeySpec => spec);

/** Keys: about half valid (fresh or reused), the rest malformed or hostile. */
export const keyArb: fc.Arbitrary<KeySpec> = fc.oneof(
  { weight: 26, arbitrary: single('valid', validKey) },
  { weight: 4, arbitrary: single('valid-edge', validEdgeKey) },
  { weight: 22, arbitrary: dupKey },
  { weight: 5, arbitrary: single('padded', paddedKey) },
  { weight: 7, arbitrary: single('quoted', quotedKey) },
  { weight: 3, arbitrary: single('comma', commaKey) },
  { weight: 3, arbitrary: single('empty', fc.constant('')) },
  { weight: 3, arbitrary: single('whitespace', whitespaceKey) },
  { weight: 6, arbitrary: single('control', controlKey) },
  { weight: 6, arbitrary: single('unicode', unicodeKey) },
  { weight: 4, arbitrary: single('long', longKey) },
  { weight: 6, arbitrary: repeatedKey },
  {
    weight: 3,
    arbitrary: fc.constant<KeySpec>({
      category: 'missing',
      headers: [],
      decoys: [],
    }),
  },
  { weight: 2, arbitrary: lookalikeKey },
);

// ---------------------------------------------------------------- bodies

function isJson(text: string): boolean {
  try {
    JSON.parse(text);
    return true;
  } catch {
    return false;
  }
}

const invalidJson = fc.oneof(
  fc.constantFrom(
    '{',
    '}',
    '{"a":',
    '[1,]',
    '{"a":1,}',
    "{'a':1}",
    '{"a":1}}',
    '{"a":1} x',
    'undefined',
    'NaN',
    'Infinity',
    '-',
    '01',
    '{"a":"\x01"}',
    '\u0000',
    ' ',
    '\ufeff{}',
    '{"a":1e999999999999999999}x',
    '<xml/>',
    'a=1&b=2',
  ),
  fc.json({ maxDepth: 2 }).map((text) => text.slice(0, -1)),
  fc.string({ minLength: 1, maxLength: 40 }),
);

/**
 * Deeply nested JSON: arrays (`[[[...]]]`, up to 40,000 levels, 80 KB) or
 * objects (`{"a":{"a":...}}`, up to 12,000 levels, 72 KB), under the 100 KB
 * limit of Express's parser.
 */
const deepJson = fc
  .tuple(
    fc.constantFrom('array' as const, 'object' as const),
    fc.oneof(
      fc.integer({ min: 64, max: 1000 }),
      fc.integer({ min: 1000, max: 6000 }),
      fc.integer({ min: 6000, max: 40_000 }),
    ),
  )
  .map(([shape, depth]) => {
    const levels = shape === 'array' ? depth : Math.min(depth, 12_000);
    const [open, close] = shape === 'array' ? ['[', ']'] : ['{"a":', '}'];
    return {
      kind: 'deep' as const,
      text: `${open.repeat(levels)}${shape === 'array' ? '' : '1'}${close.repeat(levels)}`,
    };
  });

const bodyText = fc.oneof(
  { weight: 25, arbitrary: fc.constant({ kind: 'none' as const, text: '' }) },
  {
    weight: 30,
    arbitrary: fc
      .dictionary(
        fc.string({ unit: 'grapheme', maxLength: 10 }),
        fc.jsonValue({ maxDepth: 2 }),
        { maxKeys: 6 },
      )
      .map((value) => ({
        kind: 'object' as const,
        text: JSON.stringify(value),
      })),
  },
  {
    weight: 14,
    arbitrary: fc
      .json({ maxDepth: 2, stringUnit: 'grapheme' })
      .map((text) => ({ kind: 'json' as const, text })),
  },
  {
    weight: 8,
    arbitrary: fc.anything({ maxDepth: 2 }).map((value) => ({
      kind: 'anything' as const,
      text: JSON.stringify(value) ?? 'null',
    })),
  },
  {
    weight: 12,
    arbitrary: invalidJson
      .filter((text) => !isJson(text))
      .map((text) => ({ kind: 'invalid' as const, text })),
  },
  { weight: 5, arbitrary: fc.constant({ kind: 'empty' as const, text: '' }) },
  { weight: 3, arbitrary: deepJson },
);

export const bodyArb: fc.Arbitrary<BodySpec> = fc
  .tuple(bodyText, fc.nat({ max: 4 }))
  .map(([body, roll]) => ({
    ...body,
    chunked: body.kind !== 'none' && roll === 0,
  }));

// ---------------------------------------------------------------- methods

/**
 * Methods of the decorated routes, and others: methods Node knows (the
 * platform answers 404, or 400), and tokens llhttp refuses (400). CONNECT is
 * left out: Node hands it to a `connect` event, never to the application.
 */
export const methodArb = fc.oneof(
  { weight: 30, arbitrary: fc.constant('POST') },
  { weight: 12, arbitrary: fc.constant('PUT') },
  { weight: 12, arbitrary: fc.constant('PATCH') },
  { weight: 12, arbitrary: fc.constant('DELETE') },
  {
    weight: 8,
    arbitrary: fc.constantFrom(
      'GET',
      'HEAD',
      'OPTIONS',
      'TRACE',
      'PROPFIND',
      'SEARCH',
      'QUERY',
      'PURGE',
      'MKCOL',
      'M-SEARCH',
      'LOCK',
    ),
  },
  {
    weight: 3,
    arbitrary: fc.constantFrom('post', 'Post', 'delete', 'FOO', 'PRI', 'HTTP'),
  },
  {
    weight: 2,
    arbitrary: fc
      .stringMatching(/^[A-Z][A-Z-]{0,11}$/)
      .filter((method) => method !== 'CONNECT'),
  },
);

/** Methods llhttp accepts (in HTTP mode). */
export const KNOWN_METHODS: ReadonlySet<string> = new Set(METHODS);

export const requestArb: fc.Arbitrary<RequestSpec> = fc.record({
  method: methodArb,
  target: fc.oneof(
    { weight: 17, arbitrary: fc.constant('auto' as const) },
    {
      weight: 3,
      arbitrary: fc.constantFrom(
        'collection' as const,
        'member' as const,
        'unknown' as const,
      ),
    },
  ),
  id: fc.oneof(
    fc.nat({ max: 1_000_000 }).map(String),
    fc.stringMatching(/^[a-z0-9_.~-]{1,16}$/),
    fc.constantFrom('%20', 'a%2Fb', '%C3%A9', '%00'),
  ),
  query: fc.oneof(
    { weight: 8, arbitrary: fc.constant('') },
    {
      weight: 1,
      arbitrary: fc
        .stringMatching(/^[a-z0-9=&%_.-]{0,20}$/)
        .map((query) => `?${query}`),
    },
  ),
  key: keyArb,
  body: bodyArb,
});

/** A scenario: 20 to 40 requests, sent in waves of concurrent requests. */
export const scenarioArb = fc.array(requestArb, {
  minLength: 20,
  maxLength: 40,
});

// ---------------------------------------------------------------- resolution

type Routed = keyof typeof FUZZ_ROUTES;

function isRouted(method: string): method is Routed {
  return Object.hasOwn(FUZZ_ROUTES, method);
}

function pathOf(spec: RequestSpec): {
  path: string;
  template: string | undefined;
} {
  const { method } = spec;
  let shape = spec.target;
  if (shape === 'auto') {
    shape =
      isRouted(method) && FUZZ_ROUTES[method].template.endsWith(':id')
        ? 'member'
        : 'collection';
  }
  const path =
    shape === 'collection'
      ? '/fuzz/items'
      : shape === 'member'
        ? `/fuzz/items/${spec.id}`
        : '/fuzz/nowhere';
  const template =
    shape === 'unknown' || !isRouted(method)
      ? undefined
      : FUZZ_ROUTES[method].template ===
          (shape === 'member' ? '/fuzz/items/:id' : '/fuzz/items')
        ? FUZZ_ROUTES[method].template
        : undefined;
  return { path: path + spec.query, template };
}

/**
 * Resolves a scenario into requests: a reused key takes the key (and, as its
 * category says, the method, path and body) of an earlier request of the
 * scenario that has a valid key and reaches a decorated route.
 */
export function resolveScenario(
  specs: readonly RequestSpec[],
): PlannedRequest[] {
  const planned: PlannedRequest[] = [];
  for (const [index, spec] of specs.entries()) {
    const own = pathOf(spec);
    const { key } = spec;
    if (!key.category.startsWith('dup-')) {
      const fresh = key as Extract<KeySpec, { headers: unknown }>;
      planned.push({
        index,
        category: fresh.category,
        method: spec.method,
        ...own,
        keyHeaders: fresh.headers,
        decoys: fresh.decoys,
        body: spec.body,
        reading: readKey(fresh.headers),
        ref: undefined,
        race: false,
      });
      continue;
    }
    const dup = key as Extract<KeySpec, { ref: number }>;
    const candidates = planned.filter(
      (p) => p.reading.kind === 'valid' && p.template !== undefined,
    );
    if (candidates.length === 0) {
      const headers = [
        { name: dup.name, value: dup.fallback, framing: 'normal' as const },
      ];
      planned.push({
        index,
        category: 'valid',
        method: spec.method,
        ...own,
        keyHeaders: headers,
        decoys: [],
        body: spec.body,
        reading: readKey(headers),
        ref: undefined,
        race: false,
      });
      continue;
    }
    const ref = candidates[dup.ref % candidates.length];
    const refKey = (ref.reading as { key: string }).key;
    const value =
      dup.category === 'dup-same'
        ? ref.keyHeaders[0].value
        : dup.category === 'dup-quoted'
          ? sfQuote(refKey)
          : dup.category === 'dup-padded'
            ? ` \t${refKey}  `
            : refKey;
    const headers = [
      {
        name: dup.name,
        value,
        framing:
          dup.category === 'dup-same' ? ref.keyHeaders[0].framing : 'normal',
      },
    ];
    const copyRequest =
      dup.category !== 'dup-body' && dup.category !== 'dup-method';
    planned.push({
      index,
      category: dup.category,
      method: dup.category === 'dup-method' ? spec.method : ref.method,
      path: dup.category === 'dup-method' ? own.path : ref.path,
      template: dup.category === 'dup-method' ? own.template : ref.template,
      keyHeaders: headers,
      decoys: [],
      body: copyRequest ? ref.body : spec.body,
      reading: readKey(headers),
      ref: ref.index,
      race: dup.race,
    });
  }
  return planned;
}

/**
 * Splits a scenario into waves of at most `width` requests sent in parallel.
 * Two requests with the same valid key share a wave only when the later one
 * is a `race` duplicate; otherwise the later one waits for the next wave.
 */
export function planWaves(
  requests: readonly PlannedRequest[],
  width: number,
): PlannedRequest[][] {
  const waves: PlannedRequest[][] = [];
  let wave: PlannedRequest[] = [];
  const keys = new Set<string>();
  for (const request of requests) {
    const key =
      request.reading.kind === 'valid' ? request.reading.key : undefined;
    const clash = key !== undefined && keys.has(key) && !request.race;
    if (wave.length >= width || clash) {
      waves.push(wave);
      wave = [];
      keys.clear();
    }
    wave.push(request);
    if (key !== undefined) {
      keys.add(key);
    }
  }
  if (wave.length > 0) {
    waves.push(wave);
  }
  return waves;
}

// ---------------------------------------------------------------- bytes

function chunk(body: Buffer): Buffer {
  const parts: Buffer[] = [];
  const size = Math.max(1, Math.ceil(body.length / 3));
  for (let offset = 0; offset < body.length; offset += size) {
    const piece = body.subarray(offset, offset + size);
    parts.push(Buffer.from(`${piece.length.toString(16)}\r\n`), piece);
    parts.push(Buffer.from('\r\n'));
  }
  parts.push(Buffer.from('0\r\n\r\n'));
  return Buffer.concat(parts);
}

/** The exact bytes of a request. */
export function requestBytes(
  request: PlannedRequest,
  context: { host: string; scope: string; id: string },
): Buffer {
  const lines: Buffer[] = [
    Buffer.from(`${request.method} ${request.path} HTTP/1.1`),
    Buffer.from(`Host: ${context.host}`),
    Buffer.from(`X-Fuzz-Scope: ${context.scope}`),
    ...request.keyHeaders.map(keyHeaderLine),
    ...request.decoys.map((name) => Buffer.from(`${name}: decoy-key`)),
    Buffer.from(`X-Fuzz-Id: ${context.id}`),
  ];
  const body = Buffer.from(request.body.text, 'utf8');
  if (request.body.kind !== 'none') {
    lines.push(Buffer.from('Content-Type: application/json'));
    lines.push(
      Buffer.from(
        request.body.chunked
          ? 'Transfer-Encoding: chunked'
          : `Content-Length: ${body.length}`,
      ),
    );
  }
  lines.push(Buffer.from('Connection: close'));
  const head = Buffer.concat(
    lines.flatMap((line) => [line, Buffer.from('\r\n')]),
  );
  return Buffer.concat([
    head,
    Buffer.from('\r\n'),
    request.body.kind === 'none'
      ? Buffer.alloc(0)
      : request.body.chunked
        ? chunk(body)
        : body,
  ]);
}
