-- nestjs-idempotency: the TypeORM migration CreateIdempotencyRecords1764000000000
-- (migrations/1764000000000-create-idempotency-records.ts) as plain SQL.
-- Generated from it by `npm run migrations:sql`: do not edit.
-- Apply it in one transaction, after the files named before it:
--   psql --single-transaction -v ON_ERROR_STOP=1 -f 1764000000000-create-idempotency-records.sql

      CREATE TABLE "idempotency_records" (
        "scope" text NOT NULL,
        "key" text NOT NULL,
        "fingerprint" text NOT NULL,
        "method" text NOT NULL,
        "path" text NOT NULL,
        "status" text NOT NULL,
        "response_status" smallint,
        "response_headers" jsonb,
        "response_body" bytea,
        "created_at" timestamptz NOT NULL DEFAULT now(),
        "completed_at" timestamptz,
        "expires_at" timestamptz NOT NULL,
        CONSTRAINT "PK_idempotency_records" PRIMARY KEY ("scope", "key"),
        CONSTRAINT "CHK_idempotency_records_status"
          CHECK ("status" IN ('in_progress', 'completed', 'failed', 'not_replayable'))
      );

--> statement-breakpoint

CREATE INDEX "IDX_idempotency_records_expires_at" ON "idempotency_records" ("expires_at");
