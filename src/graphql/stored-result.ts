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
