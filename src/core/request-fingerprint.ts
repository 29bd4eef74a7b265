import { hash } from 'node:crypto';
import { IdempotencyBodyUnreadableException } from '../exceptions/idempotency-body-unreadable.exception.js';
import { canonicalJson, fieldsOf } from './canonical-json.js';

/**
 * @internal A name or value of a query string whose percent-escapes do not
 * decode to UTF-8 text (`%FF`): kept as it was sent. Platforms read such a
 * value apart from the others (Fastify and `qs` keep it as it is, Node's
 * `querystring` puts U+FFFD in place of each bad byte), so decoding it would
 * let two values a handler reads apart share a fingerprint.
 */
export interface UndecodedComponent {
  readonly undecoded: string;
}

/**
 * @internal A query parameter: its name and one of its values, decoded, or
 * as sent where it does not decode.
 */
export type QueryParameter = readonly [
  name: string | UndecodedComponent,
  value: string | UndecodedComponent,
];

/** A `%` that does not begin an escape (two hex digits). */
const STRAY_PERCENT = /%(?![0-9a-fA-F]{2})/;

/**
 * `component` of a query string, decoded as a form's (`+` a space), or as
 * sent when it does not decode: its escapes are not UTF-8, or it has a `%`
 * that begins none. Platforms read such a component apart: Fastify's
 * parser and `qs` keep all of it as sent (`100%%20off`), where WHATWG's
 * would decode the rest (`100% off`, as `100%25%20off` reads).
 */
function decodeComponent(component: string): string | UndecodedComponent {
  const spaced = component.replaceAll('+', ' ');
  if (!spaced.includes('%')) {
    return spaced;
  }
  if (STRAY_PERCENT.test(spaced)) {
    return { undecoded: component };
  }
  try {
    return decodeURIComponent(spaced);
  } catch {
    return { undecoded: component };
  }
}

/**
 * @internal The parameters of a URL's query string, decoded, in the order
 * they appear (a repeated parameter once per value). Parsed from the URL
 * itself rather than from the platform's parsed `query`, whose shape differs
 * between Express (`qs`) and Fastify (`querystring`). A name or value whose
 * escapes do not decode is kept as sent ({@link UndecodedComponent}).
 */
export function queryParameters(url: string | undefined): QueryParameter[] {
  if (url === undefined) {
    return [];
  }
  // A fragment no client should send, which Node.js lets through: Express
  // drops it, Fastify reads it as part of the query. It counts as sent.
  const hash = url.indexOf('#');
  const target = hash < 0 ? url : url.slice(0, hash);
  const fragment: QueryParameter[] =
    hash < 0 ? [] : [[{ undecoded: '#' }, { undecoded: url.slice(hash + 1) }]];
  const start = target.indexOf('?');
  if (start < 0) {
    return fragment;
  }
  const query = target.slice(start + 1);
  const parameters: QueryParameter[] = fragment;
  for (const pair of query.split('&')) {
    if (pair === '') {
      continue;
    }
    const equals = pair.indexOf('=');
    parameters.push(
      equals < 0
        ? [decodeComponent(pair), '']
        : [
            decodeComponent(pair.slice(0, equals)),
            decodeComponent(pair.slice(equals + 1)),
          ],
    );
  }
  return parameters;
}

/** The name of `parameter` as options name it (none for an undecoded one). */
function parameterName(parameter: QueryParameter): string | undefined {
  const [name] = parameter;
  return typeof name === 'string' ? name : undefined;
}

/**
 * @internal A body the request carries but the transport could not read (no
 * parser for its content type, and no raw bytes kept). It has no fingerprint:
 * taken for an empty body, two different requests would be the same one.
 */
export class UnreadableBody {
  constructor(
    /** The request's `Content-Type`, if any. */
    readonly contentType: string | undefined,
    /**
     * Whether its files were read apart from it (Multer as a middleware
     * sets `req.file`, `req.files`, and only the text fields as the body).
     */
    readonly files = false,
  ) {}
}

/** @internal What the default fingerprint of a request is made of. */
export interface FingerprintParts {
  /** `POST`, or `MESSAGE` for a message. */
  readonly method: string;
  /** Route template (`/accounts/:id/refund`) or message pattern. */
  readonly route: string;
  /**
   * Path parameters (`{ id: 'A' }`), or the channel a message came on
   * (`{ channel: 'orders.eu' }`).
   */
  readonly params: Readonly<Record<string, unknown>>;
  /** Query parameters, in the order the client sent them. */
  readonly query: readonly QueryParameter[];
  /**
   * The parsed body (a JSON value, a string or a Buffer), if any; an
   * {@link UnreadableBody} for one that could not be read.
   */
  readonly body: unknown;
}

/** @internal Field names of the `fingerprint` option, by where they apply. */
export interface FingerprintFieldSelection {
  readonly include?: readonly string[];
  readonly exclude?: readonly string[];
}

/** Prefixes that restrict a name of `include`/`exclude` to one part. */
const BODY_PREFIX = 'body.';
const QUERY_PREFIX = 'query.';

/** The names of a selection that apply to one part of the request. */
interface PartNames {
  readonly include?: readonly string[];
  readonly exclude?: readonly string[];
}

/**
 * The names of `names` that apply to one part: the plain ones and those with
 * that part's prefix (stripped).
 */
function namesFor(
  names: readonly string[] | undefined,
  prefix: string,
  otherPrefix: string,
): string[] | undefined {
  return names
    ?.filter((name) => !name.startsWith(otherPrefix))
    .map((name) =>
      name.startsWith(prefix) ? name.slice(prefix.length) : name,
    );
}

/** A selection split by part, once per selection (a route's options). */
const splitSelections = new WeakMap<
  FingerprintFieldSelection,
  { readonly body: PartNames; readonly query: PartNames }
>();

function partNames(
  selection: FingerprintFieldSelection,
  part: 'body' | 'query',
): PartNames {
  let split = splitSelections.get(selection);
  if (!split) {
    split = {
      body: {
        include: namesFor(selection.include, BODY_PREFIX, QUERY_PREFIX),
        exclude: namesFor(selection.exclude, BODY_PREFIX, QUERY_PREFIX),
      },
      query: {
        include: namesFor(selection.include, QUERY_PREFIX, BODY_PREFIX),
        exclude: namesFor(selection.exclude, QUERY_PREFIX, BODY_PREFIX),
      },
    };
    splitSelections.set(selection, split);
  }
  return split[part];
}

/**
 * @internal Keeps the `include`d top-level fields of an object body (all by
 * default) minus the `exclude`d ones: of a JSON object, or of an instance of
 * a class (which a parser of the application's own may give), which stays
 * marked as one. Other bodies are kept whole: arrays, a `Buffer`, a value
 * written through its `toJSON()` (a `Date`), a `Map`, a `Set`. Names
 * prefixed `query.` apply to the query only, and `body.` to the body only.
 */
export function selectFields(
  body: unknown,
  selection: FingerprintFieldSelection,
): unknown {
  const { include, exclude } = partNames(selection, 'body');
  if (
    (include === undefined && exclude === undefined) ||
    body === null ||
    typeof body !== 'object' ||
    Buffer.isBuffer(body) ||
    body instanceof UnreadableBody ||
    fieldsOf(body) === undefined
  ) {
    return body;
  }
  const fields = body as Record<string, unknown>;
  // Without a prototype for a JSON object: its `__proto__` field is a field
  // as any other, never the object's prototype. An instance's keeps its
  // class's, defined rather than set (no setter of the class runs).
  const selected = Object.create(
    fieldsOf(body) === 'plain' ? null : (Object.getPrototypeOf(body) as object),
  ) as Record<string, unknown>;
  for (const name of include ?? Object.keys(fields)) {
    if (Object.hasOwn(fields, name) && !exclude?.includes(name)) {
      Object.defineProperty(selected, name, {
        value: fields[name],
        enumerable: true,
        writable: true,
        configurable: true,
      });
    }
  }
  return selected;
}

/**
 * @internal Keeps the query parameters whose names are `include`d (all by
 * default) minus the `exclude`d ones, in their order. Names prefixed `body.`
 * apply to the body only, and `query.` to the query only.
 */
export function selectQuery(
  query: readonly QueryParameter[],
  selection: FingerprintFieldSelection,
): QueryParameter[] {
  const { include, exclude } = partNames(selection, 'query');
  return query.filter((parameter) => {
    const name = parameterName(parameter);
    // `tag` names `tag[]`, `tag[0]`, `tag[x]` and `[tag]` too: `qs` gives
    // the handler all of them as `query.tag`.
    const root = name === undefined ? undefined : qsRoot(name);
    const named = (names: readonly string[]) =>
      names.includes(name!) || names.includes(root!);
    return (
      (include === undefined || (name !== undefined && named(include))) &&
      (name === undefined || exclude === undefined || !named(exclude))
    );
  });
}

/**
 * What is hashed: `head`, then the body, telling a string, a Buffer and JSON
 * apart. Hashed in one call (no Hash object per request).
 *
 * A string is hashed as UTF-8, which writes each lone surrogate as U+FFFD:
 * one that is not well-formed Unicode (a JSON body `"\ud800"`, a text body
 * in UTF-16) is written escaped instead, as JSON escapes it (`exact`; not by
 * the formula of 0.1.0), so that `"\ud800"`, `"\ud801"` and `"\ufffd"` are
 * three bodies. Every other string is hashed as before.
 * @throws IdempotencyBodyUnreadableException for an {@link UnreadableBody}.
 */
function withBody(head: string, body: unknown, exact = true): string | Buffer {
  if (body instanceof UnreadableBody) {
    throw new IdempotencyBodyUnreadableException(body.contentType, body.files);
  }
  if (Buffer.isBuffer(body)) {
    return Buffer.concat([Buffer.from(`${head}b:`), body]);
  }
  if (typeof body === 'string') {
    return exact && !body.isWellFormed()
      ? `${head}u:${JSON.stringify(body)}`
      : `${head}s:${body}`;
  }
  return body === undefined ? head : `${head}j:${canonicalJson(body)}`;
}

/**
 * Prefix of the fingerprints of the current formula. Records written by
 * 0.1.0 carry a bare sha256 hex digest of the legacy formula instead.
 */
const FINGERPRINT_VERSION = 'v2:';

/** A name `qs` may merge into an array: `a`, `a[]`, `a[0]` (its root `a`). */
const ARRAY_NAME = /^([^[]+)(?:\[\d*\])+$/;
/** A name with brackets (`page[size]`, `a[0][x]`), and its root. */
const BRACKETED_NAME = /^([^[]+)\[/;
/**
 * A bracket group that begins a name, its content, and what follows it up
 * to the next `[` (which `qs` drops): `[a]`, `[a]x[b]`.
 */
const LEADING_GROUP = /^\[([^[\]]*)\][^[]*/;
/** A root `qs` may read as an array index. */
const INDEX = /^\d+$/;

const NO_ROOTS: ReadonlySet<string> = new Set();

/** A parameter's name: as decoded, or as sent. */
function sentName([name]: QueryParameter): string {
  return typeof name === 'string' ? name : name.undecoded;
}

/**
 * A name as `qs` reads it: one that begins with a bracket group as that
 * group's content followed by its other groups (`[a]` is `a`, `[a][b]` is
 * `a[b]`, `[a]x[b]` is `a[b]`); any other as it is. `undefined` for one that
 * begins with an empty group (`[]`, `[][x]`): an array whose items `qs`
 * spreads over the root's indexes `0`, `1`, …
 */
function qsName(sent: string): string | undefined {
  const group = LEADING_GROUP.exec(sent);
  if (!group) {
    return sent;
  }
  return group[1] === '' ? undefined : group[1] + sent.slice(group[0].length);
}

/** The root of a name as `qs` reads it (`a` of `a`, `a[]`, `[a][b]`). */
function qsRoot(sent: string): string | undefined {
  const name = qsName(sent);
  return name === undefined
    ? undefined
    : (BRACKETED_NAME.exec(name)?.[1] ?? name);
}

/**
 * The roots whose names `qs` merges into one value in the order they are
 * sent: an object name (`a[b]`, `a[0][x]`) beside another of its root that
 * is no object name (`a`, `a[]`, `a[0]`), or beside one it extends or that
 * extends it (`a[b]` and `a[b][c]`). `a=2&a[b]=1` is `["2", {"b": "1"}]`,
 * the other way round `[{"b": "1"}, "2"]`. Object names of distinct
 * fields alone (`page[size]`, `page[number]`) are not merged. Names are
 * read as `qs` reads them ({@link qsName}): `[a]` is `a`.
 */
function mergedRoots(query: readonly QueryParameter[]): ReadonlySet<string> {
  const objects = new Map<string, string[]>();
  const others = new Set<string>();
  for (const parameter of query) {
    const name = qsName(sentName(parameter));
    if (name === undefined) {
      continue;
    }
    const array = ARRAY_NAME.exec(name)?.[1];
    const object = array ? undefined : BRACKETED_NAME.exec(name)?.[1];
    if (object) {
      objects.set(object, [...(objects.get(object) ?? []), name]);
    } else {
      others.add(array ?? name);
    }
  }
  const merged = new Set<string>();
  for (const [root, names] of objects) {
    if (
      others.has(root) ||
      names.some((name, i) =>
        names.some((other, j) => i !== j && other.startsWith(`${name}[`)),
      )
    ) {
      merged.add(root);
    }
  }
  return merged;
}

/**
 * What the names `qs` spreads over indexes sort by, when a name begins
 * with `[]`: those and every bracketed name of an index root (`[0]`,
 * `0[x]`), which `qs` merges with them in the order they are sent.
 */
const SPREAD = '';

/**
 * The name `parameter` sorts by: as `qs` reads it ({@link qsName}); for an
 * array name (`a[]`, `a[0]`), or any name of a root that
 * {@link mergedRoots} finds merged, its root. Parameters of one root keep
 * their order (the sort is stable): `qs` (Express's `extended` parser,
 * Fastify's `querystringParser`) merges `a`, `[a]`, `a[]` and `a[0]` into
 * one array in the order they are sent. Object names alone (`page[size]`)
 * sort whole: their order does not count. With a name that begins with
 * `[]` (`spread`), that name and every bracketed one of an index root sort
 * as one ({@link SPREAD}).
 */
function sortName(
  parameter: QueryParameter,
  merged: ReadonlySet<string>,
  spread: boolean,
): string {
  const sent = sentName(parameter);
  const name = qsName(sent);
  if (
    name === undefined ||
    (spread && sent.includes('[') && INDEX.test(qsRoot(sent)!))
  ) {
    return SPREAD;
  }
  const array = ARRAY_NAME.exec(name)?.[1];
  if (array) {
    return array;
  }
  const root = merged.size === 0 ? undefined : BRACKETED_NAME.exec(name)?.[1];
  return root !== undefined && merged.has(root) ? root : name;
}

/**
 * @internal The default fingerprint of a request: `v2:` and the sha256 (hex)
 * of its method, route template, path parameters (by name), query parameters
 * (by name; the values of a repeated parameter in their order) and canonical
 * body.
 * @throws IdempotencyBodyUnreadableException for a body that could not be read.
 */
export function requestFingerprint(parts: FingerprintParts): string {
  const bracketed = parts.query.some((parameter) =>
    sentName(parameter).includes('['),
  );
  const merged = bracketed ? mergedRoots(parts.query) : NO_ROOTS;
  const spread =
    bracketed &&
    parts.query.some((parameter) => qsName(sentName(parameter)) === undefined);
  const query = [...parts.query].sort((a, b) => {
    const [x, y] = [sortName(a, merged, spread), sortName(b, merged, spread)];
    return x < y ? -1 : x > y ? 1 : 0;
  });
  const head = `${parts.method}\n${parts.route}\n${canonicalJson(parts.params)}\n${JSON.stringify(query)}\n`;
  return (
    FINGERPRINT_VERSION + hash('sha256', withBody(head, parts.body), 'hex')
  );
}

/**
 * @internal The fingerprint of a request whose route has a `fingerprint`
 * function: the function's `value` with the method, the route and the path
 * parameters (or a message's pattern and channel), which always count, so
 * that one value on two routes, or on two path parameters, is two requests.
 * A value that is not well-formed Unicode (a lone surrogate, which UTF-8
 * writes as U+FFFD) counts escaped, as JSON writes it: two such values are
 * two requests.
 */
export function boundFingerprint(
  parts: Pick<FingerprintParts, 'method' | 'route' | 'params'>,
  value: string,
): string {
  const written = value.isWellFormed()
    ? `fingerprint\n${value}`
    : `fingerprint~\n${JSON.stringify(value)}`;
  return (
    FINGERPRINT_VERSION +
    hash(
      'sha256',
      `${parts.method}\n${parts.route}\n${canonicalJson(parts.params)}\n${written}`,
      'hex',
    )
  );
}

/**
 * @internal The fingerprint of 0.1.0 (method, route template and canonical
 * body only), which its records carry: a bare sha256 hex digest.
 */
export function legacyRequestFingerprint(
  parts: Pick<FingerprintParts, 'method' | 'route' | 'body'>,
): string {
  return hash(
    'sha256',
    withBody(`${parts.method}\n${parts.route}\n`, parts.body, false),
    'hex',
  );
}

/**
 * @internal Whether a stored fingerprint has the form of those the module
 * writes now (`v2:` and a sha256 hex digest).
 */
export function isCurrentFingerprint(fingerprint: string): boolean {
  return (
    fingerprint.startsWith(FINGERPRINT_VERSION) &&
    isLegacyFingerprint(fingerprint.slice(FINGERPRINT_VERSION.length))
  );
}

/** @internal Whether a stored fingerprint was written by 0.1.0. */
export function isLegacyFingerprint(fingerprint: string): boolean {
  return /^[0-9a-f]{64}$/.test(fingerprint);
}
