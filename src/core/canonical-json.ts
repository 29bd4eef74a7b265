import { types } from 'node:util';

/**
 * @internal JSON with the keys of every object in code-point order, so that
 * two bodies that differ only in key order have the same text: recursively
 * for the usual body, iteratively for one nested deeper than
 * {@link RECURSION_DEPTH} (which then cannot exhaust the stack). Both write
 * the same text.
 *
 * Values that JSON cannot write, or writes alike, are written apart from
 * every other value (see {@link scalarJson} and {@link shapeOf}), so that
 * two bodies the handler sees differently never share a text; a body of
 * plain JSON values has the text it always had.
 */
export function canonicalJson(root: unknown): string {
  return recursiveJson(root, [], false) ?? iterativeJson(root);
}

/**
 * The token of a reference back to an object still being written (a cycle,
 * which only an application's own parser gives, such as a deserializer
 * that restores references): `^` and how many objects up it is (1: the
 * innermost one open). No JSON text holds it outside a string; two bodies
 * of the same cyclic shape write the same text, and the walk ends.
 */
function cycleJson(up: number): string {
  return `^${up}`;
}

/** How deep {@link recursiveJson} goes before leaving a body to {@link iterativeJson}. */
const RECURSION_DEPTH = 32;

/**
 * How an object is written: its items, as an array's, or its own enumerable
 * fields, as an object's; or, for a value JSON writes through its
 * `toJSON()`, that value, written as is (its own `toJSON()` uncalled, as
 * JSON does). Between `open` and `close`, which mark what is no plain array
 * or object with a token that no JSON text holds outside a string.
 */
type Shape =
  | {
      readonly open: string;
      readonly close: string;
      readonly items: readonly unknown[];
    }
  | {
      readonly open: string;
      readonly close: string;
      readonly fields: Readonly<Record<string, unknown>>;
    }
  | { readonly open: string; readonly close: string; readonly json: unknown };

/** The name a mark gives the class of an object, as JSON writes a string. */
function className(value: object): string {
  const prototype = Object.getPrototypeOf(value) as {
    constructor?: { name?: unknown };
  } | null;
  const name = prototype?.constructor?.name;
  return JSON.stringify(typeof name === 'string' ? name : '');
}

/**
 * @internal How {@link canonicalJson} writes the fields of `value` (a
 * `toJSON()`'s value, `json`, has its own `toJSON()` uncalled, as JSON
 * does): `plain` as a JSON object's, for an object of no class (a JSON
 * parser's, of this realm or another, or one without a prototype);
 * `instance` as an instance's of a class; `undefined` for an object not
 * written by its fields: an array, a value written through its `toJSON()`,
 * a `Map`, a `Set`.
 */
export function fieldsOf(
  value: object,
  json = false,
): 'plain' | 'instance' | undefined {
  if (
    (!json && typeof (value as { toJSON?: unknown }).toJSON === 'function') ||
    Array.isArray(value)
  ) {
    return undefined;
  }
  const prototype = Object.getPrototypeOf(value) as object | null;
  if (prototype === null || Object.getPrototypeOf(prototype) === null) {
    return 'plain';
  }
  return types.isMap(value) || types.isSet(value) ? undefined : 'instance';
}

/**
 * How {@link canonicalJson} writes `value` (`json`: the value a `toJSON()`
 * returned). Plain arrays and objects as JSON writes them; the others,
 * which only a parser of the application's own gives a handler (a
 * `reviver` that makes `Date`s, a deserializer that makes class
 * instances), with a mark:
 * - a value with a `toJSON()` (a `Date`, a `Buffer`, a decimal) as what it
 *   returns, marked `@` and its class name:
 *   `@"Date"("2024-01-01T00:00:00.000Z")`, never the string a client may
 *   send in its place;
 * - a `Map` as its entries and a `Set` as its values, in their order (which
 *   a handler that iterates them sees): `Map([["a",1]])`, `Set([1])`;
 * - an instance of another class as its own enumerable fields (as JSON
 *   writes it), marked `#` and its class name: `#"Money"({"amount":1})`,
 *   never a plain object of the same fields, which a handler tells apart
 *   (`instanceof`). What it keeps elsewhere (private `#fields`, getters)
 *   does not count.
 */
function shapeOf(value: object, json: boolean): Shape {
  const toJSON = json ? undefined : (value as { toJSON?: unknown }).toJSON;
  if (typeof toJSON === 'function') {
    return {
      open: `@${className(value)}(`,
      close: ')',
      json: (toJSON as () => unknown).call(value),
    };
  }
  if (Array.isArray(value)) {
    return { open: '[', close: ']', items: value };
  }
  if (types.isMap(value)) {
    return {
      open: 'Map([',
      close: '])',
      items: [...(value as Map<unknown, unknown>)],
    };
  }
  if (types.isSet(value)) {
    return { open: 'Set([', close: '])', items: [...(value as Set<unknown>)] };
  }
  const fields = value as Record<string, unknown>;
  return fieldsOf(value, true) === 'plain'
    ? { open: '{', close: '}', fields }
    : { open: `#${className(value)}({`, close: '})', fields };
}

/**
 * The canonical JSON of `value` (`json`: a `toJSON()`'s value), or
 * `undefined` when it is nested too deep. `open`: the objects being
 * written around it, outermost first.
 */
function recursiveJson(
  value: unknown,
  open: object[],
  json: boolean,
): string | undefined {
  if (value === null || typeof value !== 'object') {
    return scalarJson(value);
  }
  const depth = open.length;
  if (json && open[depth - 1] === value) {
    // A `toJSON()` that returns its own object: written by its fields,
    // as JSON writes it, not a cycle.
    return shapedJson(value, open, json);
  }
  const back = open.lastIndexOf(value);
  if (back >= 0) {
    return cycleJson(depth - back);
  }
  if (depth >= RECURSION_DEPTH) {
    return undefined;
  }
  open.push(value);
  const text = shapedJson(value, open, json);
  open.pop();
  return text;
}

/** {@link recursiveJson} of an object, `open` ending with it. */
function shapedJson(
  value: object,
  open: object[],
  json: boolean,
): string | undefined {
  const shape = shapeOf(value, json);
  if ('json' in shape) {
    const inner = recursiveJson(shape.json, open, true);
    return inner === undefined ? undefined : shape.open + inner + shape.close;
  }
  if ('items' in shape) {
    const { items } = shape;
    let out = shape.open;
    for (let i = 0; i < items.length; i += 1) {
      const item = recursiveJson(items[i], open, false);
      if (item === undefined) {
        return undefined;
      }
      out += i > 0 ? `,${item}` : item;
    }
    return out + shape.close;
  }
  const record = shape.fields;
  const names = Object.keys(record).sort();
  let out = shape.open;
  let first = true;
  for (const name of names) {
    const field = record[name];
    if (field === undefined) {
      continue;
    }
    const item = recursiveJson(field, open, false);
    if (item === undefined) {
      return undefined;
    }
    out += `${first ? '' : ','}${JSON.stringify(name)}:${item}`;
    first = false;
  }
  return out + shape.close;
}

/** {@link canonicalJson} with a stack of its own, for any depth. */
function iterativeJson(root: unknown): string {
  let out = '';
  // Text still to write (literal, or a value's JSON), objects or arrays
  // still to expand, and ends of the objects being written, in reverse
  // order.
  const work: Array<string | Nested | typeof CLOSED> = [jsonOf(root, false)];
  // The objects being written, outermost first, and the depth of each
  // (1: the outermost).
  const stack: object[] = [];
  const open = new Map<object, number>();
  while (work.length > 0) {
    const item = work.pop()!;
    if (typeof item === 'string') {
      out += item;
      continue;
    }
    if (item === CLOSED) {
      open.delete(stack.pop()!);
      continue;
    }
    // A `toJSON()` that returns its own object: written by its fields, as
    // JSON writes it, not a cycle (nor another object opened).
    const itself = item.json && stack.at(-1) === item.value;
    if (!itself) {
      const at = open.get(item.value);
      if (at !== undefined) {
        out += cycleJson(stack.length - at + 1);
        continue;
      }
      stack.push(item.value);
      open.set(item.value, stack.length);
      work.push(CLOSED);
    }
    const shape = shapeOf(item.value, item.json);
    out += shape.open;
    work.push(shape.close);
    if ('json' in shape) {
      work.push(jsonOf(shape.json, true));
      continue;
    }
    if ('items' in shape) {
      const { items } = shape;
      for (let i = items.length - 1; i >= 0; i -= 1) {
        work.push(jsonOf(items[i], false));
        if (i > 0) {
          work.push(',');
        }
      }
      continue;
    }
    const record = shape.fields;
    const names = Object.keys(record)
      .filter((name) => record[name] !== undefined)
      .sort();
    for (let i = names.length - 1; i >= 0; i -= 1) {
      work.push(jsonOf(record[names[i]], false));
      work.push(`${i > 0 ? ',' : ''}${JSON.stringify(names[i])}:`);
    }
  }
  return out;
}

/** In {@link iterativeJson}'s work: the object opened last is written. */
const CLOSED = Symbol('closed');

/** An object that {@link iterativeJson} has yet to expand. */
class Nested {
  constructor(
    readonly value: object,
    /** Whether it is a `toJSON()`'s value (see {@link shapeOf}). */
    readonly json: boolean,
  ) {}
}

/** A scalar's JSON, or an object to expand. */
function jsonOf(value: unknown, json: boolean): string | Nested {
  return value !== null && typeof value === 'object'
    ? new Nested(value, json)
    : scalarJson(value);
}

/**
 * A scalar's JSON; for the numbers JSON writes as another value (`Infinity`,
 * `-Infinity` and `NaN` as `null`, `-0` as `0`: a JSON parser reads
 * `1e309` as `Infinity`) and for a `bigint` (which JSON refuses), a token
 * that no JSON text contains outside a string.
 */
function scalarJson(value: unknown): string {
  if (typeof value === 'number') {
    return Number.isFinite(value)
      ? Object.is(value, -0)
        ? '-0'
        : JSON.stringify(value)
      : String(value);
  }
  if (typeof value === 'bigint') {
    return `${value}n`;
  }
  return JSON.stringify(value) ?? 'null';
}
