import { startEmbeddedPostgres } from './embedded-postgres.js';

/**
 * Starts a throwaway PostgreSQL server for the suite, unless DATABASE_URL
 * names one already. Each test file then creates a database of its own on
 * that server.
 */
export default async function globalSetup() {
  if (process.env.DATABASE_URL) {
    return;
  }
  const server = await startEmbeddedPostgres();
  process.env.DATABASE_URL = server.url;
  globalThis.embeddedPostgres = server;
}
