/** @internal A key, or why the header does not carry a usable one. */
export type KeyReading =
  { readonly key: string } | { readonly problem: string } | undefined;

/**
 * Reads an RFC 8941 sf-string (`"..."` with `\"` and `\\` escapes).
 * @returns the string, or `undefined` when the value is not a valid sf-string.
 */
function parseSfString(value: string): string | undefined {
  let result = '';
  for (let i = 1; i < value.length; i += 1) {
    const char = value[i];
    if (char === '\\') {
      const escaped = value[i + 1];
      if (escaped !== '"' && escaped !== '\\') {
        return undefined;
      }
      result += escaped;
      i += 1;
    } else if (char === '"') {
      return i === value.length - 1 ? result : undefined;
    } else if (char < ' ' || char > '~') {
      return undefined;
    } else {
      result += char;
    }
  }
  return undefined;
}

/**
 * @internal Reads a key header from the values it was sent with, by the
 * same rules on every transport (an HTTP request's header, a message's):
 * none is no key; more than one is refused as repeated, equal or not; one
 * is a plain token, taken as it is (an empty one too, for the key rules to
 * refuse), or a quoted sf-string, unquoted (`"k-1"` and `k-1` are one key).
 * A value that is no text is refused.
 */
export function readKeyValues(values: readonly unknown[]): KeyReading {
  if (values.length === 0) {
    return undefined;
  }
  if (values.length > 1) {
    return { problem: 'it is repeated' };
  }
  const [value] = values;
  if (typeof value !== 'string') {
    return { problem: 'it is not a string' };
  }
  if (!value.startsWith('"')) {
    return { key: value };
  }
  const key = parseSfString(value);
  return key === undefined
    ? { problem: 'it is not a valid quoted string' }
    : { key };
}
