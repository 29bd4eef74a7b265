import { Controller } from '@nestjs/common';
import { EventPattern, MessagePattern, Transport } from '@nestjs/microservices';
import { Test } from '@nestjs/testing';
import {
  IdempotencyConfigurationError,
  Idempotent,
  IdempotencyModule,
  MemoryIdempotencyStore,
} from '../../src/index.js';
import { startStoreApp } from '../utils/store-app.js';
import {
  IDEMPOTENCY_TABLE_NAME,
  idempotencyMigrations,
} from '../../migrations/index.js';
import { CreateOrders1764000000001 } from '../fixtures/create-orders.migration.js';
import {
  PLATFORMS,
  send,
  startTestApp,
  type TestApp,
} from '../utils/test-app.js';
import {
  IdempotencyConfig,
  IdempotencyConfigModule,
  ordersModule,
  SettingsModule,
  SettingsService,
} from './module.fixtures.js';

async function ttlHours(target: TestApp, key: string): Promise<number> {
  const [row] = await target.db.query<{ hours: number }>(
    `SELECT round(extract(epoch FROM expires_at - created_at) / 3600)::int AS hours
     FROM ${IDEMPOTENCY_TABLE_NAME} WHERE key = $1`,
    [key],
  );
  return row.hours;
}

/** The bootstrap error of the module without the DataSource it needs. */
function missingDataSource(named: string): string {
  return [
    `IdempotencyModule found no TypeORM DataSource${named}: without a \`store\` option, it keeps its records in PostgreSQL through TypeORM.`,
    'Potential solutions:',
    '- Import TypeOrmModule.forRoot() (or forRootAsync()) in the application module.',
    '- Pass `dataSource: <name>` to IdempotencyModule if the DataSource has a name.',
    '- Or give IdempotencyModule another store: `IdempotencyModule.forRoot({ store: new MemoryIdempotencyStore() })` (or a Redis or DynamoDB store).',
  ].join('\n');
}

async function roundTrip(target: TestApp, key: string): Promise<void> {
  const first = await send(target, '/orders', {
    key,
    body: { reference: key },
  });
  expect(first.status).toBe(201);
  const second = await send(target, '/orders', {
    key,
    body: { reference: key },
  });
  expect(second.headers.get('idempotent-replayed')).toBe('true');
  expect(await second.text()).toBe(JSON.stringify(await first.json()));
}

describe.each(PLATFORMS)('module registration (%s)', (platform) => {
  let target: TestApp | undefined;
  afterEach(async () => {
    await target?.close();
    target = undefined;
  });

  it('forRoot() applies module options (ttl)', async () => {
    target = await startTestApp({
      platform,
      imports: [ordersModule()],
      idempotency: { ttl: '5h' },
    });
    await roundTrip(target, 'root-1');
    expect(await ttlHours(target, 'root-1')).toBe(5);
  });

  it('forRootAsync({ imports, inject, useFactory })', async () => {
    target = await startTestApp({
      platform,
      idempotency: false,
      imports: [
        IdempotencyModule.forRootAsync({
          imports: [SettingsModule],
          inject: [SettingsService],
          useFactory: (settings: SettingsService) => ({
            ttl: settings.idempotencyTtl,
          }),
        }),
        ordersModule(),
      ],
    });
    await roundTrip(target, 'factory-1');
    expect(await ttlHours(target, 'factory-1')).toBe(2);
  });

  it('forRootAsync({ useClass })', async () => {
    target = await startTestApp({
      platform,
      idempotency: false,
      imports: [
        IdempotencyModule.forRootAsync({ useClass: IdempotencyConfig }),
        ordersModule(),
      ],
    });
    await roundTrip(target, 'class-1');
    expect(await ttlHours(target, 'class-1')).toBe(3);
  });

  it('forRootAsync({ imports, useExisting })', async () => {
    target = await startTestApp({
      platform,
      idempotency: false,
      imports: [
        IdempotencyModule.forRootAsync({
          imports: [IdempotencyConfigModule],
          useExisting: IdempotencyConfig,
        }),
        ordersModule(),
      ],
    });
    await roundTrip(target, 'existing-1');
    expect(await ttlHours(target, 'existing-1')).toBe(3);
  });

  it('uses a named DataSource, borrowing its pool', async () => {
    target = await startTestApp({
      platform,
      imports: [ordersModule('payments')],
      typeorm: { name: 'payments' },
      idempotency: { dataSource: 'payments' },
    });
    await roundTrip(target, 'named-1');
    const rows = await target.db.query(
      `SELECT 1 FROM orders WHERE reference = 'named-1'`,
    );
    expect(rows).toHaveLength(1);
  });

  it('opens one connection of its own, the presence session: requests are served by the application pool', async () => {
    target = await startTestApp({
      platform,
      imports: [ordersModule()],
      typeorm: { poolSize: 2 },
    });
    const app = target;
    const answers = await Promise.all(
      Array.from({ length: 20 }, (_, i) =>
        send(app, '/orders', {
          key: `pool-${i}`,
          body: { reference: `pool-${i}` },
        }),
      ),
    );
    expect(answers.map((a) => a.status)).toEqual(Array(20).fill(201));
    const [{ backends, presence }] = await target.db.query<{
      backends: number;
      presence: number;
    }>(
      `SELECT count(*) FILTER (WHERE application_name <> 'idempotency-presence')::int AS backends,
              count(*) FILTER (WHERE application_name = 'idempotency-presence')::int AS presence
       FROM pg_stat_activity
       WHERE datname = current_database() AND pid <> pg_backend_pid()`,
    );
    expect(backends).toBeLessThanOrEqual(2);
    expect(presence).toBe(1);
  });

  it('fails at bootstrap, saying what to do, without the DataSource it names', async () => {
    const failure = startTestApp({
      platform,
      imports: [ordersModule()],
      idempotency: { dataSource: 'missing' },
    });
    await expect(failure).rejects.toThrow(IdempotencyConfigurationError);
    await expect(failure).rejects.toThrow(
      missingDataSource(' named "missing"'),
    );
  });

  it('fails at bootstrap, saying what to do, when the migrations did not run', async () => {
    const failure = startTestApp({
      platform,
      imports: [ordersModule()],
      typeorm: { migrations: [], migrationsRun: false, synchronize: true },
    });
    await expect(failure).rejects.toThrow(/idempotencyMigrations/);
  });

  it.each([
    [
      'of the functions',
      'LeaseIdempotencyClaims1764000000003',
      /The functions of migrations LeaseIdempotencyClaims1764000000003 and KeepIdempotencyGenerations1764000000005 do not exist.*idempotencyMigrations/s,
    ],
    [
      'keeping generations of keys',
      'KeepIdempotencyGenerations1764000000005',
      /The functions of migrations LeaseIdempotencyClaims1764000000003 and KeepIdempotencyGenerations1764000000005 do not exist.*idempotencyMigrations/s,
    ],
    [
      'binding steps to their requests',
      'BindIdempotencySteps1764000000004',
      /The columns of migration BindIdempotencySteps1764000000004 do not exist.*idempotencyMigrations/s,
    ],
    [
      'counting failed attempts',
      'CountIdempotencyFailures1764000000006',
      /The table "idempotency_failures" of migration CountIdempotencyFailures1764000000006 does not exist.*idempotencyMigrations/s,
    ],
  ])(
    'fails at bootstrap, saying what to do, when the migration %s did not run',
    async (_what, name, message) => {
      const failure = startTestApp({
        platform,
        imports: [ordersModule()],
        typeorm: {
          migrations: [
            ...idempotencyMigrations.filter(
              (migration) => migration.name !== name,
            ),
            CreateOrders1764000000001,
          ],
        },
      });
      await expect(failure).rejects.toThrow(message);
    },
  );
});

describe('module options', () => {
  it('fails at bootstrap without TypeORM and without a store, naming both ways out: TypeOrmModule and the `store` option', async () => {
    const moduleRef = await Test.createTestingModule({
      imports: [IdempotencyModule.forRoot({ gc: false })],
    }).compile();
    const app = moduleRef.createNestApplication({ logger: false });
    try {
      const failure: unknown = await app.init().then(
        () => undefined,
        (error: unknown) => error,
      );
      expect(failure).toBeInstanceOf(IdempotencyConfigurationError);
      expect((failure as Error).message).toBe(missingDataSource(''));
    } finally {
      await app.close();
    }
  });

  it('refuses an invalid option at bootstrap', async () => {
    const compiling = Test.createTestingModule({
      imports: [IdempotencyModule.forRoot({ ttl: 'soon' })],
    }).compile();
    await expect(compiling).rejects.toThrow(IdempotencyConfigurationError);
    await expect(compiling).rejects.toThrow(/Invalid duration for "ttl"/);
  });
});

describe('message handlers of one pattern', () => {
  /** A consumer class named `Consumer`, as two feature modules each have one. */
  const consumer = () => {
    @Controller()
    class Consumer {
      @EventPattern('orders.created')
      @Idempotent()
      handle(_data: unknown): void {}
    }
    return Consumer;
  };

  it('fails at bootstrap when two of them have the same class and method names: their records would be one', async () => {
    const failure: unknown = await startStoreApp({
      store: new MemoryIdempotencyStore(),
      controllers: [consumer(), consumer()],
    }).then(
      async (started) => {
        await started.close();
        return undefined;
      },
      (error: unknown) => error,
    );
    expect(failure).toBeInstanceOf(IdempotencyConfigurationError);
    expect((failure as Error).message).toContain(
      'Two handlers of the message pattern orders.created are both named Consumer.handle',
    );
  });

  /** Two consumers of `orders.paid`, the ledger's acknowledging or not. */
  const consumers = (acknowledge: boolean) => {
    @Controller()
    class AuditConsumer {
      @EventPattern('orders.paid')
      @Idempotent()
      audit(_data: unknown): void {}
    }
    @Controller()
    class LedgerConsumer {
      @EventPattern('orders.paid')
      @Idempotent({ acknowledge })
      book(_data: unknown): void {}
    }
    return [AuditConsumer, LedgerConsumer];
  };

  it('fails at bootstrap when one of two acknowledges: the broker settles the delivery they share once', async () => {
    const failure: unknown = await startStoreApp({
      store: new MemoryIdempotencyStore(),
      controllers: consumers(true),
    }).then(
      async (started) => {
        await started.close();
        return undefined;
      },
      (error: unknown) => error,
    );
    expect(failure).toBeInstanceOf(IdempotencyConfigurationError);
    expect((failure as Error).message).toContain(
      'The message pattern orders.paid has 2 handlers that one delivery reaches (AuditConsumer.audit, LedgerConsumer.book), and LedgerConsumer.book acknowledges',
    );
  });

  /** Whether an application of `controllers` fails at bootstrap, and how. */
  const bootstrapFailure = (controllers: (new () => unknown)[]) =>
    startStoreApp({ store: new MemoryIdempotencyStore(), controllers }).then(
      async (started) => {
        await started.close();
        return undefined;
      },
      (error: unknown) => error,
    );

  it('fails at bootstrap when one that acknowledges shares its NATS subjects with a wildcard handler: one delivery reaches both', async () => {
    @Controller()
    class AnyAccount {
      @EventPattern('accounts.*', Transport.NATS)
      @Idempotent()
      any(_data: unknown): void {}
    }
    @Controller()
    class AccountA {
      @EventPattern('accounts.A')
      @Idempotent({ acknowledge: true })
      book(_data: unknown): void {}
    }
    const failure = await bootstrapFailure([AnyAccount, AccountA]);
    expect(failure).toBeInstanceOf(IdempotencyConfigurationError);
    expect((failure as Error).message).toContain(
      'The message patterns accounts.*, accounts.A have 2 handlers that one delivery reaches (AnyAccount.any, AccountA.book), and AccountA.book acknowledges',
    );
  });

  it('fails at bootstrap when one that acknowledges shares its pattern with a handler without @Idempotent(): that one acknowledges by itself', async () => {
    @Controller()
    class LedgerConsumer {
      @EventPattern('orders.refunded')
      @Idempotent({ acknowledge: true })
      book(_data: unknown): void {}
    }
    @Controller()
    class AuditConsumer {
      @EventPattern('orders.refunded')
      audit(_data: unknown): void {}
    }
    const failure = await bootstrapFailure([LedgerConsumer, AuditConsumer]);
    expect(failure).toBeInstanceOf(IdempotencyConfigurationError);
    expect((failure as Error).message).toContain(
      'The message pattern orders.refunded has 2 handlers that one delivery reaches (LedgerConsumer.book, AuditConsumer.audit without @Idempotent()), and LedgerConsumer.book acknowledges',
    );
  });

  it('starts when the handler without @Idempotent() answers requests, or listens on another transport', async () => {
    @Controller()
    class LedgerConsumer {
      @EventPattern('orders.voided', Transport.RMQ)
      @Idempotent({ acknowledge: true })
      book(_data: unknown): void {}
    }
    @Controller()
    class AuditConsumer {
      @EventPattern('orders.voided', Transport.KAFKA)
      audit(_data: unknown): void {}
      @MessagePattern('orders.voided')
      quote(_data: unknown): number {
        return 1;
      }
    }
    expect(
      await bootstrapFailure([LedgerConsumer, AuditConsumer]),
    ).toBeUndefined();
  });

  it('starts when the wildcard matches none of its subjects, or is on another transport', async () => {
    @Controller()
    class AnyOrder {
      @EventPattern('orders.*.paid', Transport.NATS)
      @Idempotent()
      any(_data: unknown): void {}
    }
    @Controller()
    class OtherAccount {
      @EventPattern('accounts.*', Transport.KAFKA)
      @Idempotent()
      any(_data: unknown): void {}
    }
    @Controller()
    class AccountA {
      @EventPattern('accounts.A', Transport.NATS)
      @Idempotent({ acknowledge: true })
      book(_data: unknown): void {}
    }
    expect(
      await bootstrapFailure([AnyOrder, OtherAccount, AccountA]),
    ).toBeUndefined();
  });

  it('starts when they listen on two transports, or answer requests: no delivery is theirs both', async () => {
    @Controller()
    class RabbitConsumer {
      @EventPattern('orders.shipped', Transport.RMQ)
      @Idempotent({ acknowledge: true })
      ship(_data: unknown): void {}
    }
    @Controller()
    class KafkaConsumer {
      @EventPattern('orders.shipped', Transport.KAFKA)
      @Idempotent({ acknowledge: true })
      ship(_data: unknown): void {}
    }
    @Controller()
    class QuoteResponder {
      @MessagePattern('orders.quote')
      @Idempotent({ acknowledge: true })
      quote(_data: unknown): number {
        return 1;
      }
    }
    @Controller()
    class QuoteAuditor {
      @MessagePattern('orders.quote')
      @Idempotent()
      audit(_data: unknown): number {
        return 1;
      }
    }
    const started = await startStoreApp({
      store: new MemoryIdempotencyStore(),
      controllers: [
        RabbitConsumer,
        KafkaConsumer,
        QuoteResponder,
        QuoteAuditor,
      ],
    });
    await started.close();
  });

  it('starts with two that do not acknowledge', async () => {
    const started = await startStoreApp({
      store: new MemoryIdempotencyStore(),
      controllers: consumers(false),
    });
    await started.close();
  });
});
