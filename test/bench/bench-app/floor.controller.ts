import {
  BadRequestException,
  Body,
  ConflictException,
  Controller,
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
import { createHash, randomUUID } from 'node:crypto';
import type { Pool, PoolClient, QueryConfig } from 'pg';
import type { DataSource } from 'typeorm';
import { CreatePaymentDto } from '../../../sample-app/payments/create-payment.dto.js';
import { BENCH_POOL } from './bench-pool.js';
import { charge, WAIT_MS, type ModeSetting } from './modes.handler.js';
import { writeThrough } from './typeorm.library.js';

/**
 * The statements of the claim protocol, as PostgresIdempotencyStore sends
 * them (the functions of the shipped migrations): the floor must send what
 * the store sends, so they change together.
 */
const ACQUIRE = `SELECT * FROM idempotency_acquire_generation($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)`;
const FINISH = `SELECT * FROM idempotency_finish($1, $2, $3, $4, $5, $6, $7, $8)`;
const RELEASE = `SELECT * FROM idempotency_release($1, $2, $3, $4)`;

/** The module's defaults: its scope, lease and the sample's ttl. */
const SCOPE = 'global';
const LEASE_MS = 15_000;
const TTL_MS = 24 * 3_600_000;
const CONTENT_TYPE = 'application/json; charset=utf-8';
const STORED_HEADERS = JSON.stringify({ 'content-type': CONTENT_TYPE });

interface AcquireRow {
  acquired: boolean;
  status: string | null;
  fingerprint: string | null;
  response_status: number | null;
  response_body: Buffer | null;
}

/**
 * The floor of the module's protocol on PostgreSQL: the same statements as
 * the PostgreSQL store, and nothing else, in a plain route (no interceptor,
 * no lease renewal, no presence, no events). Through the `pg` driver, as
 * named prepared statements (parsed once per connection), on the
 * application's pool:
 *
 *   1. the claim, `idempotency_acquire_generation(...)`, in autocommit, then the
 *      handler's gateway charge (no connection held);
 *   2. `START TRANSACTION` (`dataSource.transaction`), the handler's
 *      inserts through its repositories, the fenced completion
 *      `idempotency_finish(...)` with the response's bytes on the
 *      transaction's connection (not finished: the claim was lost, roll
 *      back, 503), `COMMIT`;
 *   3. then the response; on a failure, `idempotency_release(...)`.
 *
 * A key that is taken answers as the module does: the stored response
 * (replayed), 409 in progress, 422 for another request.
 */
@Controller('modes')
export class FloorController {
  constructor(
    @InjectDataSource() private readonly dataSource: DataSource,
    @Inject(BENCH_POOL) private readonly pool: Pool,
  ) {}

  @Post('light')
  @Header('content-type', CONTENT_TYPE)
  light(
    @Body() dto: CreatePaymentDto,
    @Res({ passthrough: true }) response: Response,
    @Headers('idempotency-key') key?: string,
  ): Promise<string> {
    return this.run('light', dto, response, key);
  }

  @Post('gateway')
  @Header('content-type', CONTENT_TYPE)
  gateway(
    @Body() dto: CreatePaymentDto,
    @Res({ passthrough: true }) response: Response,
    @Headers('idempotency-key') key?: string,
  ): Promise<string> {
    return this.run('gateway', dto, response, key);
  }

  private async run(
    setting: ModeSetting,
    dto: CreatePaymentDto,
    response: Response,
    key: string | undefined,
  ): Promise<string> {
    if (!key) {
      throw new BadRequestException('Idempotency-Key is required.');
    }
    const path = `/modes/${setting}`;
    const fingerprint = `v2:${createHash('sha256')
      .update(`POST\n${path}\n{}\n[]\nj:${JSON.stringify(dto)}`)
      .digest('hex')}`;
    const owner = randomUUID();
    const {
      rows: [claim],
    } = await this.pool.query<AcquireRow>(
      statement('idempotency_acquire_generation', ACQUIRE, [
        SCOPE,
        key,
        fingerprint,
        'POST',
        path,
        owner,
        null,
        LEASE_MS,
        TTL_MS,
        false,
      ]),
    );
    if (!claim.acquired) {
      return taken(claim, fingerprint, response);
    }
    try {
      const { id } = await charge(key, WAIT_MS[setting]);
      return await this.dataSource.transaction(async (manager) => {
        const payment = await writeThrough(manager, dto, id);
        const body = JSON.stringify(payment);
        // The transaction's own connection: the record commits with the
        // payment or not at all.
        const connection = (
          manager.queryRunner as unknown as { databaseConnection: PoolClient }
        ).databaseConnection;
        const {
          rows: [finish],
        } = await connection.query<{ finished: boolean }>(
          statement('idempotency_finish', FINISH, [
            SCOPE,
            key,
            owner,
            'completed',
            201,
            STORED_HEADERS,
            Buffer.from(body),
            TTL_MS,
          ]),
        );
        if (!finish.finished) {
          throw new ServiceUnavailableException('The claim was lost.');
        }
        return body;
      });
    } catch (error) {
      await this.pool.query(
        statement('idempotency_release', RELEASE, [SCOPE, key, owner, false]),
      );
      throw error;
    }
  }
}

/** A named prepared statement: parsed once per connection, then only bound. */
function statement(name: string, text: string, values: unknown[]): QueryConfig {
  return { name, text, values };
}

/** The answer for a key another attempt holds or finished. */
function taken(
  claim: AcquireRow,
  fingerprint: string,
  response: Response,
): string {
  if (claim.fingerprint !== fingerprint) {
    throw new UnprocessableEntityException(
      'This Idempotency-Key was used for another request.',
    );
  }
  if (claim.status !== 'completed' || !claim.response_body) {
    throw new ConflictException('A request with this key is in progress.');
  }
  response.status(claim.response_status ?? 200);
  response.setHeader('idempotent-replayed', 'true');
  // As text: Nest would serialize a Buffer as JSON. The floor stores JSON
  // text only, so its bytes are the same.
  return claim.response_body.toString('utf8');
}
