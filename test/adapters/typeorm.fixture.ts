import { Injectable } from '@nestjs/common';
import { TypeOrmModule } from '@nestjs/typeorm';
import { IdempotencyContext } from '../../src/index.js';
import { PaymentsWriter, type AdapterFixture } from './adapter-fixture.js';

/** The payments handler's statements on TypeORM's `EntityManager`. */
@Injectable()
class TypeOrmPaymentsWriter implements PaymentsWriter {
  constructor(private readonly idempotency: IdempotencyContext) {}

  async insertPayment(key: string, amount: number): Promise<number> {
    const rows: Array<{ id: number }> = await this.idempotency.manager.query(
      'INSERT INTO payments (key, amount) VALUES ($1, $2) RETURNING id',
      [key, amount],
    );
    return rows[0].id;
  }

  async insertLedger(paymentId: number, amount: number): Promise<void> {
    await this.idempotency.manager.query(
      'INSERT INTO ledger_entries (payment_id, amount) VALUES ($1, $2)',
      [paymentId, amount],
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
};
