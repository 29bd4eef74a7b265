/** @internal Statuses whose responses have no body (a `Response` refuses one). */
export const NULL_BODY_STATUSES: ReadonlySet<number> = new Set([
  101, 103, 204, 205, 304,
]);
