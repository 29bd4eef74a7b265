import { createHash } from 'node:crypto';

/**
 * JSON with the keys of every object in code-point order, so that two bodies
 * that differ only in key order have the same text. Iterative, so that a
 * deeply nested body cannot exhaust the stack.
 */
function canonicalJson(root: unknown): string {
  const out: string[] = [];
  // Values still to write, and literal text between them, in reverse order.
  const work: Array<{ value: unknown } | string> = [{ value: root }];
  while (work.length > 0) {
    const item = work.pop()!;
    if (typeof item === 'string') {
      out.push(item);
      continue;
    }
    const { value } = item;
    if (value === null || typeof value !== 'object') {
      out.push(JSON.stringify(value) ?? 'null');
      continue;
    }
    const parts: Array<{ value: unknown } | string> = [];
    if (Array.isArray(value)) {
      parts.push('[');
      value.forEach((element, index) => {
        parts.push(...(index > 0 ? [','] : []), { value: element });
      });
      parts.push(']');
    } else {
      const record = value as Record<string, unknown>;
      const names = Object.keys(record)
        .filter((name) => record[name] !== undefined)
        .sort();
      parts.push('{');
      names.forEach((name, index) => {
        parts.push(`${index > 0 ? ',' : ''}${JSON.stringify(name)}:`, {
          value: record[name],
        });
      });
      parts.push('}');
    }
    for (let i = parts.length - 1; i >= 0; i -= 1) {
      work.push(parts[i]);
    }
  }
  return out.join('');
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
