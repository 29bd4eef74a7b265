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
