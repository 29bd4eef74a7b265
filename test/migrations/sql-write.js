/*
 * Writes the migrations as plain SQL files, `migrations/sql/*.sql`, from
 * the TypeORM migrations compiled to dist/ (`npm run migrations:sql` builds
 * first), and removes a file no migration makes. An argument names another
 * folder to write them in.
 */
import { mkdir, readdir, rm, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { idempotencySqlMigrations } from '../../dist/migrations/index.js';

const folder = path.resolve(
  process.argv[2] ?? path.join(import.meta.dirname, '../../migrations/sql'),
);
const migrations = await idempotencySqlMigrations();
const names = new Set(migrations.map((migration) => migration.fileName));
await mkdir(folder, { recursive: true });
for (const file of await readdir(folder)) {
  if (file.endsWith('.sql') && !names.has(file)) {
    await rm(path.join(folder, file));
  }
}
for (const { fileName, sql } of migrations) {
  await writeFile(path.join(folder, fileName), sql);
}
console.log(`${migrations.length} SQL migrations written to ${folder}`);
