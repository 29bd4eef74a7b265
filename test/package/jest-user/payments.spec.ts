/*
 * The Jest test of an application that installed nestjs-idempotency and its
 * required peers only: jest-user.e2e-spec.ts copies it into a project
 * outside the repository and runs Jest there, as the application would
 * (ts-jest, ES modules), with no optional peer of the library installed.
 * It tests a feature module in a test module of its own, on
 * `IdempotencyTestingModule`.
 */
import {
  Body,
  Controller,
  Header,
  Module,
  Post,
  type INestApplication,
} from '@nestjs/common';
import { Test } from '@nestjs/testing';
import request from 'supertest';
import { Idempotent } from 'nestjs-idempotency';
import { IdempotencyTestingModule } from 'nestjs-idempotency/testing';

let executions = 0;

@Controller('payments')
class PaymentsController {
  @Post()
  @Header('Location', '/payments/latest')
  @Idempotent()
  create(@Body() body: { reference: string }): {
    execution: number;
    reference: string;
  } {
    executions += 1;
    return { execution: executions, reference: body.reference };
  }
}

@Module({ controllers: [PaymentsController] })
class PaymentsModule {}

describe('payments', () => {
  let app: INestApplication | undefined;

  beforeAll(async () => {
    const moduleRef = await Test.createTestingModule({
      imports: [IdempotencyTestingModule.forRoot(), PaymentsModule],
    }).compile();
    app = moduleRef.createNestApplication();
    await app.init();
  });

  afterAll(async () => {
    await app?.close();
  });

  it('executes a payment once and replays it for its duplicate', async () => {
    const pay = () =>
      request(app!.getHttpServer())
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
    expect(executions).toBe(1);
  });
});
