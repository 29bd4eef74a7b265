/**
 * @internal `url` without its password, to be printed: as the URL parser
 * reads it (a password may hold an `@`), or, for what it cannot read, all
 * of what comes before the host's `@`.
 */
export function redactUrl(url: string): string {
  try {
    const parsed = new URL(url);
    if (parsed.password !== '') {
      parsed.password = '***';
    }
    return parsed.href;
  } catch {
    return url.replace(/\/\/([^:/@]*):.*@/, '//$1:***@');
  }
}
