/*
 * The test of the application module, on a memory store and without any
 * database: the README's "Testing your application" quotes it.
 */
import type { INestApplication } from '@nestjs/common';
import { Test } from '@nestjs/testing';
import request from 'supertest';
import { DataSource } from 'typeorm';
import { IdempotencyStore, MemoryIdempotencyStore } from 'nestjs-idempotency';
import { AppModule } from './app.module.js';
import { PaymentsController } from './payments.controller.js';

describe('payments', () => {
  let app: INestApplication;

  beforeAll(async () => {
    const moduleRef = await Test.createTestingModule({ imports: [AppModule] })
      // The module's store: in memory, in place of PostgreSQL's.
      .overrideProvider(IdempotencyStore)
      .useValue(new MemoryIdempotencyStore())
      // The application's own DataSource, never connected.
      .overrideProvider(DataSource)
      .useValue(new DataSource({ type: 'postgres' }))
      .compile();
    app = moduleRef.createNestApplication();
    await app.init();
  });

  afterAll(async () => {
    await app?.close();
  });

  it('executes a payment once and replays it for its duplicate', async () => {
    const pay = () =>
      request(app.getHttpServer())
        .post('/payments')
        .set('Idempotency-Key', 'payment-1')
        .send({ reference: 'p-1' });

    const first = await pay();
    expect(first.status).toBe(201);
    expect(first.headers['idempotent-replayed']).toBeUndefined();
    expect(first.headers.location).toBe('/payments/latest');
    expect(first.body).toEqual({ execution: 1, reference: 'p-1' });

    const second = await pay();
    expect(second.status).toBe(201);
    expect(second.headers['idempotent-replayed']).toBe('true');
    expect(second.headers.location).toBe('/payments/latest');
    expect(second.body).toEqual({ execution: 1, reference: 'p-1' });
    expect(app.get(PaymentsController).executions).toBe(1);
  });
});
