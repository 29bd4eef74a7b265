-- nestjs-idempotency: the TypeORM migration DropIdempotencyStatusCheck1764000000007
-- (migrations/1764000000007-drop-idempotency-status-check.ts) as plain SQL.
-- Generated from it by `npm run migrations:sql`: do not edit.
-- Apply it in one transaction, after the files named before it:
--   psql --single-transaction -v ON_ERROR_STOP=1 -f 1764000000007-drop-idempotency-status-check.sql

ALTER TABLE "idempotency_records" DROP CONSTRAINT IF EXISTS "CHK_idempotency_records_status";
