/** Stops the embedded PostgreSQL server started by global-setup.js. */
export default async function globalTeardown() {
  await globalThis.embeddedPostgres?.stop();
}
