import { createHash } from 'node:crypto';

/**
 * JSON with the keys of every object in code-point order, so that two bodies
 * that differ only in key order have the same text.
 */
function canonicalJson(value: unknown): string {
  if (value === null || typeof value !== 'object') {
    return JSON.stringify(value) ?? 'null';
  }
  if (Array.isArray(value)) {
    return `[${value.map(canonicalJson).join(',')}]`;
  }
  const record = value as Record<string, unknown>;
  const fields = Object.keys(record)
    .filter((name) => record[name] !== undefined)
    .sort()
    .map((name) => `${JSON.stringify(name)}:${canonicalJson(record[name])}`);
  return `{${fields.join(',')}}`;
}

/**
 * @internal Keeps the `include`d top-level fields of a JSON object body (all
 * by default) minus the `exclude`d ones. Other bodies are kept whole.
 */
export function selectFields(
  body: unknown,
  include: readonly string[] | undefined,
  exclude: readonly string[] | undefined,
): unknown {
  if (
    (include === undefined && exclude === undefined) ||
    body === null ||
    typeof body !== 'object' ||
    Array.isArray(body) ||
    Buffer.isBuffer(body)
  ) {
    return body;
  }
  const fields = body as Record<string, unknown>;
  const selected: Record<string, unknown> = {};
  for (const name of include ?? Object.keys(fields)) {
    if (Object.hasOwn(fields, name) && !exclude?.includes(name)) {
      selected[name] = fields[name];
    }
  }
  return selected;
}

/**
 * @internal sha256 (hex) of the method, the route template and the canonical
 * body of a request.
 */
export function requestFingerprint(
  method: string,
  route: string,
  body: unknown,
): string {
  const hash = createHash('sha256').update(`${method}\n${route}\n`);
  if (Buffer.isBuffer(body)) {
    hash.update('b:').update(body);
  } else if (typeof body === 'string') {
    hash.update('s:').update(body);
  } else if (body !== undefined) {
    hash.update('j:').update(canonicalJson(body));
  }
  return hash.digest('hex');
}
