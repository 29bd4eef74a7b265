import { Injectable } from '@nestjs/common';
import { TypeOrmModule } from '@nestjs/typeorm';
import type { Pool } from 'pg';
import { DataSource } from 'typeorm';
import { IdempotencyContext } from '../../src/index.js';
import { PaymentsWriter, type AdapterFixture } from './adapter-fixture.js';

/** The payments handler's statements on TypeORM's `EntityManager`. */
@Injectable()
class TypeOrmPaymentsWriter implements PaymentsWriter {
  constructor(private readonly idempotency: IdempotencyContext) {}

  async insertPayment(
    key: string,
    amount: number,
    chargeId: string | null = null,
  ): Promise<number> {
    const rows: Array<{ id: number }> = await this.idempotency.manager.query(
      'INSERT INTO payments (key, amount, charge_id) VALUES ($1, $2, $3) RETURNING id',
      [key, amount, chargeId],
    );
    return rows[0].id;
  }

  async insertLedger(
    paymentId: number,
    amount: number,
    account: string | null = null,
  ): Promise<void> {
    await this.idempotency.manager.query(
      'INSERT INTO ledger_entries (payment_id, account, amount) VALUES ($1, $2, $3)',
      [paymentId, account, amount],
    );
  }

  async backendPid(): Promise<number> {
    const rows: Array<{ pid: number }> = await this.idempotency.manager.query(
      'SELECT pg_backend_pid() AS pid',
    );
    return rows[0].pid;
  }

  async raw(sql: string): Promise<void> {
    await this.idempotency.manager.query(sql);
  }
}

/** TypeORM, the default: no adapter option. */
export const typeormFixture: AdapterFixture = {
  name: 'typeorm',
  setUp(url) {
    return {
      imports: [
        TypeOrmModule.forRoot({
          type: 'postgres',
          url,
          synchronize: false,
          logging: false,
          extra: { max: 5 },
        }),
      ],
      providers: [{ provide: PaymentsWriter, useClass: TypeOrmPaymentsWriter }],
    };
  },
  poolOf: (app) => {
    const { master } = app.get(DataSource).driver as unknown as {
      master?: Pool;
    };
    if (!master) {
      throw new Error('The DataSource has no pg pool');
    }
    return master;
  },
};
