import { idempotencyMigrations } from '../../migrations/index.js';
import { startTestApp } from '../utils/test-app.js';
import { typeormPool } from '../utils/statement-faults.js';
import { CreatePayments1764000000100 } from './create-payments.migration.js';
import { faultMatrixModule } from './fault-matrix.module.js';
import { LedgerEntry } from './ledger-entry.entity.js';
import { Payment } from './payment.entity.js';
import { describePostgresMatrix } from './postgres-matrix.js';

/**
 * Issue 28: the connection of each statement the module sends or relies on
 * is lost just before it and just after it, then the client retries
 * (postgres-matrix.ts, the cells in postgres-cells.ts), on TypeORM, the
 * default data library, whose handler writes through repositories. The
 * other data libraries: adapters-fault-matrix.e2e-spec.ts; the other
 * stores: store-matrix.ts.
 */
describePostgresMatrix({
  reference: 'reference',
  async start(platform, leaseMs, gatewayUrl) {
    const target = await startTestApp({
      platform,
      imports: [faultMatrixModule(gatewayUrl)],
      typeorm: {
        entities: [Payment, LedgerEntry],
        migrations: [...idempotencyMigrations, CreatePayments1764000000100],
      },
      idempotency: { gc: false, lease: `${leaseMs}ms` },
    });
    return { target, pool: typeormPool(target.dataSource) };
  },
});
