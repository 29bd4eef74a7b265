/**
 * What the module reads of a GraphQL output type (graphql-js's classes,
 * told apart by their `Symbol.toStringTag`, without importing graphql).
 */
interface OutputType {
  readonly name?: string;
  readonly ofType?: OutputType;
  getFields?(): Record<string, { readonly type: OutputType }>;
  parseValue?(value: unknown): unknown;
  serialize?(value: unknown): unknown;
}

/** The scalars of the specification, which JSON keeps as they are. */
const SPECIFIED_SCALARS = new Set(['String', 'Int', 'Float', 'Boolean', 'ID']);

/** An ISO 8601 date and time, as `Date.prototype.toJSON()` writes one. */
const ISO_DATE = /^\d{4,6}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?Z$/;

function kind(type: OutputType): string {
  return Object.prototype.toString.call(type).slice(8, -1);
}

/**
 * @internal A mutation's stored result (its JSON) as its resolver first
 * returned it, for GraphQL to serialize again by its return type: the
 * value of a custom scalar field back to what the scalar serializes (a
 * `DateTime`'s `Date`, stored as its ISO text, which the scalar would
 * refuse), through its object types, lists and non-null wrappers. A value
 * no revival suits is left as stored; an abstract type's (interface,
 * union) is left whole.
 */
export function reviveResult(
  value: unknown,
  type: OutputType | undefined,
): unknown {
  if (type === undefined || value === null || value === undefined) {
    return value;
  }
  switch (kind(type)) {
    case 'GraphQLNonNull':
      return reviveResult(value, type.ofType);
    case 'GraphQLList':
      return Array.isArray(value)
        ? value.map((item) => reviveResult(item, type.ofType))
        : value;
    case 'GraphQLObjectType': {
      if (typeof value !== 'object' || Array.isArray(value)) {
        return value;
      }
      const fields = type.getFields?.() ?? {};
      const revived: Record<string, unknown> = { ...value };
      for (const [name, field] of Object.entries(fields)) {
        if (name in revived) {
          revived[name] = reviveResult(revived[name], field.type);
        }
      }
      return revived;
    }
    case 'GraphQLScalarType':
      return SPECIFIED_SCALARS.has(type.name ?? '')
        ? value
        : reviveScalar(value, type);
    default:
      return value;
  }
}

/**
 * A custom scalar's stored value as the scalar serializes it: the stored
 * value itself where the scalar serializes it (a JSON scalar, a string
 * one); else what its `parseValue` makes of it (`DateTime`: a `Date` from
 * its text), or a `Date` of an ISO text (`Timestamp`, which parses numbers
 * only), whichever the scalar serializes; else the stored value.
 */
function reviveScalar(value: unknown, scalar: OutputType): unknown {
  const candidates: Array<() => unknown> = [
    () => value,
    () => scalar.parseValue?.(value),
  ];
  if (typeof value === 'string' && ISO_DATE.test(value)) {
    candidates.push(() => new Date(value));
  }
  for (const candidate of candidates) {
    try {
      const revived = candidate();
      const serialized = scalar.serialize?.(revived);
      if (
        revived !== undefined &&
        serialized !== null &&
        serialized !== undefined
      ) {
        return revived;
      }
    } catch {
      // Not this one.
    }
  }
  return value;
}

/** A place in a result: the keys and indexes that lead to it from its root. */
type ResultPath = ReadonlyArray<string | number>;

/**
 * @internal The stored header of a mutation's result that says where its
 * resolver returned a `Date` or a `BigInt`, which JSON stores as text
 * (`{"dates": [paths], "bigints": [paths]}`): its replay has them back
 * wherever they were, whichever fields read them (a field named apart from
 * its property, `@Field({ name })`, which the return type does not tell).
 * A record without it (of an earlier version) is revived by the return
 * type alone.
 */
export const RESULT_REVIVALS_HEADER = 'idempotency-graphql-revivals';

/** Where a result had its dates and bigints. */
interface ResultRevivals {
  readonly dates: ResultPath[];
  readonly bigints: ResultPath[];
}

/**
 * @internal A mutation's result as JSON (a `BigInt` by its digits, which
 * JSON cannot write otherwise), and the header of its revivals (see
 * {@link RESULT_REVIVALS_HEADER}), when it has dates or bigints.
 * @throws JSON's error for a result JSON cannot hold (a cycle).
 */
export function resultJson(result: unknown): {
  readonly json: string | undefined;
  readonly revivals: string | undefined;
} {
  const revivals: ResultRevivals = { dates: [], bigints: [] };
  // The path of each object serialized, for its properties' paths: JSON
  // visits an object's properties right after the object itself.
  const paths = new WeakMap<object, ResultPath>();
  const json = JSON.stringify(
    result,
    function (this: Record<string, unknown>, key: string, value: unknown) {
      const parent = paths.get(this);
      const path: ResultPath =
        parent === undefined
          ? []
          : [...parent, Array.isArray(this) ? Number(key) : key];
      if (this[key] instanceof Date) {
        revivals.dates.push(path);
      }
      if (typeof value === 'bigint') {
        revivals.bigints.push(path);
        return value.toString();
      }
      if (typeof value === 'object' && value !== null) {
        paths.set(value, path);
      }
      return value;
    },
  ) as string | undefined;
  return {
    json,
    revivals:
      revivals.dates.length + revivals.bigints.length === 0
        ? undefined
        : JSON.stringify(revivals),
  };
}

/**
 * @internal A stored result (its JSON parsed) with its dates and bigints
 * back where the header of its revivals says they were; as it is without
 * that header.
 */
export function reviveRecorded(
  value: unknown,
  header: string | string[] | undefined,
): unknown {
  if (typeof header !== 'string') {
    return value;
  }
  let revivals: Partial<ResultRevivals>;
  try {
    revivals = JSON.parse(header) as Partial<ResultRevivals>;
  } catch {
    return value;
  }
  let revived = value;
  for (const path of revivals.dates ?? []) {
    revived = revivedAt(revived, path, (text) => new Date(text));
  }
  for (const path of revivals.bigints ?? []) {
    revived = revivedAt(revived, path, (digits) =>
      /^-?\d+$/.test(digits) ? BigInt(digits) : digits,
    );
  }
  return revived;
}

/** `root` with the text at `path` made into `make`'s value. */
function revivedAt(
  root: unknown,
  path: ResultPath,
  make: (text: string) => unknown,
): unknown {
  if (path.length === 0) {
    return typeof root === 'string' ? make(root) : root;
  }
  let holder = root;
  for (const key of path.slice(0, -1)) {
    if (!hasOwn(holder, key)) {
      return root;
    }
    holder = (holder as Record<string | number, unknown>)[key];
  }
  const last = path[path.length - 1];
  const text = hasOwn(holder, last)
    ? (holder as Record<string | number, unknown>)[last]
    : undefined;
  if (typeof text === 'string') {
    // Defined, not assigned: a key such as `__proto__` stays a property.
    Object.defineProperty(holder, last, {
      value: make(text),
      writable: true,
      enumerable: true,
      configurable: true,
    });
  }
  return root;
}

function hasOwn(holder: unknown, key: string | number): boolean {
  return (
    typeof holder === 'object' && holder !== null && Object.hasOwn(holder, key)
  );
}
