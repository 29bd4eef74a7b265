-- nestjs-idempotency: the TypeORM migration CreateIdempotencySteps1764000000001
-- (migrations/1764000000001-create-idempotency-steps.ts) as plain SQL.
-- Generated from it by `npm run migrations:sql`: do not edit.
-- Apply it in one transaction, after the files named before it:
--   psql --single-transaction -v ON_ERROR_STOP=1 -f 1764000000001-create-idempotency-steps.sql

      CREATE TABLE "idempotency_steps" (
        "scope" text NOT NULL,
        "key" text NOT NULL,
        "step" text NOT NULL,
        "result" jsonb NOT NULL,
        "created_at" timestamptz NOT NULL DEFAULT now(),
        "expires_at" timestamptz NOT NULL,
        CONSTRAINT "PK_idempotency_steps" PRIMARY KEY ("scope", "key", "step")
      );

--> statement-breakpoint

CREATE INDEX "IDX_idempotency_steps_expires_at" ON "idempotency_steps" ("expires_at");
