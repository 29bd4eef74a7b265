import {
  BadRequestException,
  Body,
  ConflictException,
  Header,
  Headers,
  Inject,
  Post,
  Res,
  ServiceUnavailableException,
  UnprocessableEntityException,
} from '@nestjs/common';
import { InjectDataSource } from '@nestjs/typeorm';
import type { Response } from 'express';
import { randomUUID } from 'node:crypto';
import type { Pool, PoolClient, QueryConfig } from 'pg';
import type { DataSource } from 'typeorm';
import { CreatePaymentDto } from '../../../sample-app/payments/create-payment.dto.js';
import { BENCH_POOL } from './bench-pool.js';
import { charge, WAIT_MS, type ModeSetting } from './modes.handler.js';
import { writeThrough } from './typeorm.library.js';

/** The type of every answer of the floors: JSON text. */
export const CONTENT_TYPE = 'application/json; charset=utf-8';

/** One attempt at a request: its key and route, and what holds the key for it. */
export interface Attempt {
  readonly key: string;
  readonly path: string;
  readonly fingerprint: string;
  /** A new UUID per attempt: the completion's fence. */
  readonly owner: string;
}

/** An attempt done: the response's bytes, on the transaction's connection. */
export interface Completion extends Attempt {
  readonly connection: PoolClient;
  readonly body: Buffer;
}

/** What holds a key that a claim did not take. */
export interface Holder {
  readonly status: string | null;
  readonly fingerprint: string | null;
  readonly response_status: number | null;
  readonly response_body: Buffer | null;
}

/**
 * The routes of a floor of the modes bench, `POST /modes/light` and
 * `POST /modes/gateway`: plain routes (no interceptor) that send the claim
 * protocol's statements themselves, through the `pg` driver on the
 * application's pool, around the handler's writes. A subclass, the
 * `@Controller('modes')`, says which statements; the steps are the same:
 *
 *   1. the claim ({@link claim}), in autocommit; a key it did not take
 *      answers as the module does: 422 for another request, 409 in
 *      progress, else the stored response, replayed; then the handler's
 *      gateway charge (no connection held);
 *   2. `START TRANSACTION` (`dataSource.transaction`), the handler's
 *      inserts through its repositories, the completion with the
 *      response's bytes ({@link complete}, fenced by the attempt's owner)
 *      on the transaction's connection (not completed: the claim was lost,
 *      roll back, 503), `COMMIT`;
 *   3. then the response, 201 and the payment's JSON; on a failure, the
 *      key released ({@link release}).
 */
export abstract class FloorRoutes {
  constructor(
    @InjectDataSource() private readonly dataSource: DataSource,
    @Inject(BENCH_POOL) protected readonly pool: Pool,
  ) {}

  @Post('light')
  @Header('content-type', CONTENT_TYPE)
  light(
    @Body() dto: CreatePaymentDto,
    @Res({ passthrough: true }) response: Response,
    @Headers('idempotency-key') key?: string,
  ): Promise<string> {
    return this.answer('light', dto, response, key);
  }

  @Post('gateway')
  @Header('content-type', CONTENT_TYPE)
  gateway(
    @Body() dto: CreatePaymentDto,
    @Res({ passthrough: true }) response: Response,
    @Headers('idempotency-key') key?: string,
  ): Promise<string> {
    return this.answer('gateway', dto, response, key);
  }

  /** What tells another request under the same key from this one. */
  protected abstract fingerprint(path: string, dto: CreatePaymentDto): string;

  /** Takes the attempt's key (undefined), or reads what holds it. */
  protected abstract claim(attempt: Attempt): Promise<Holder | undefined>;

  /**
   * Stores the response in the handler's transaction, if the attempt still
   * holds its key (true).
   */
  protected abstract complete(completion: Completion): Promise<boolean>;

  /** Frees the attempt's key after a failure, if it still holds it. */
  protected abstract release(attempt: Attempt): Promise<void>;

  private async answer(
    setting: ModeSetting,
    dto: CreatePaymentDto,
    response: Response,
    key: string | undefined,
  ): Promise<string> {
    if (!key) {
      throw new BadRequestException('Idempotency-Key is required.');
    }
    const path = `/modes/${setting}`;
    const attempt: Attempt = {
      key,
      path,
      fingerprint: this.fingerprint(path, dto),
      owner: randomUUID(),
    };
    const holder = await this.claim(attempt);
    if (holder) {
      return taken(holder, attempt.fingerprint, response);
    }
    try {
      const { id } = await charge(key, WAIT_MS[setting]);
      return await this.dataSource.transaction(async (manager) => {
        const body = JSON.stringify(await writeThrough(manager, dto, id));
        // The transaction's own connection: the record commits with the
        // payment or not at all.
        const connection = (
          manager.queryRunner as unknown as { databaseConnection: PoolClient }
        ).databaseConnection;
        const completion = { ...attempt, connection, body: Buffer.from(body) };
        if (!(await this.complete(completion))) {
          throw new ServiceUnavailableException('The claim was lost.');
        }
        return body;
      });
    } catch (error) {
      await this.release(attempt);
      throw error;
    }
  }
}

/** A named prepared statement: parsed once per connection, then only bound. */
export function statement(
  name: string,
  text: string,
  values: unknown[],
): QueryConfig {
  return { name, text, values };
}

/** The answer for a key another attempt holds or finished. */
function taken(
  holder: Holder,
  fingerprint: string,
  response: Response,
): string {
  if (holder.fingerprint !== fingerprint) {
    throw new UnprocessableEntityException(
      'This Idempotency-Key was used for another request.',
    );
  }
  if (holder.status !== 'completed' || !holder.response_body) {
    throw new ConflictException('A request with this key is in progress.');
  }
  response.status(holder.response_status ?? 200);
  response.setHeader('idempotent-replayed', 'true');
  // As text: Nest would serialize a Buffer as JSON. The floors store JSON
  // text only, so its bytes are the same.
  return holder.response_body.toString('utf8');
}
