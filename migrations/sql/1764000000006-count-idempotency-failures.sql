-- nestjs-idempotency: the TypeORM migration CountIdempotencyFailures1764000000006
-- (migrations/1764000000006-count-idempotency-failures.ts) as plain SQL.
-- Generated from it by `npm run migrations:sql`: do not edit.
-- Apply it in one transaction, after the files named before it:
--   psql --single-transaction -v ON_ERROR_STOP=1 -f 1764000000006-count-idempotency-failures.sql

      CREATE TABLE "idempotency_failures" (
        "scope" text NOT NULL,
        "key" text NOT NULL,
        "failures" integer NOT NULL,
        "expires_at" timestamptz NOT NULL,
        CONSTRAINT "PK_idempotency_failures" PRIMARY KEY ("scope", "key")
      );

--> statement-breakpoint

CREATE INDEX "IDX_idempotency_failures_expires_at" ON "idempotency_failures" ("expires_at");
