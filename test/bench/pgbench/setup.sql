-- The handler's tables of the pgbench scripts, beside the module's
-- (apply migrations/sql/*.sql first).
CREATE TABLE payments (id uuid PRIMARY KEY DEFAULT gen_random_uuid(), reference text NOT NULL, amount integer NOT NULL, charge_id text, created_at timestamptz NOT NULL DEFAULT now());
CREATE TABLE ledger_entries (id uuid PRIMARY KEY DEFAULT gen_random_uuid(), payment_id uuid NOT NULL, account text NOT NULL, amount integer NOT NULL);
