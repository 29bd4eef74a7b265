import { Controller } from '@nestjs/common';
import { createHash } from 'node:crypto';
import type { CreatePaymentDto } from '../../../sample-app/payments/create-payment.dto.js';
import { CONTENT_TYPE, FloorRoutes, statement } from './floor-routes.js';
import type { Attempt, Completion, Holder } from './floor-routes.js';

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
const STORED_HEADERS = JSON.stringify({ 'content-type': CONTENT_TYPE });

interface AcquireRow extends Holder {
  readonly acquired: boolean;
}

/**
 * The floor of the module's protocol on PostgreSQL: the same statements as
 * the PostgreSQL store, and nothing else, in a plain route (no interceptor,
 * no lease renewal, no presence, no events; the steps: floor-routes.ts),
 * as named prepared statements (parsed once per connection):
 *
 *   1. the claim, `idempotency_acquire_generation(...)`, with the module's
 *      fingerprint of the request;
 *   2. the fenced completion `idempotency_finish(...)` in the handler's
 *      transaction;
 *   3. on a failure, `idempotency_release(...)`.
 */
@Controller('modes')
export class FloorController extends FloorRoutes {
  protected fingerprint(path: string, dto: CreatePaymentDto): string {
    return `v2:${createHash('sha256')
      .update(`POST\n${path}\n{}\n[]\nj:${JSON.stringify(dto)}`)
      .digest('hex')}`;
  }

  protected async claim(attempt: Attempt): Promise<Holder | undefined> {
    const {
      rows: [claim],
    } = await this.pool.query<AcquireRow>(
      statement('idempotency_acquire_generation', ACQUIRE, [
        SCOPE,
        attempt.key,
        attempt.fingerprint,
        'POST',
        attempt.path,
        attempt.owner,
        null,
        LEASE_MS,
        TTL_MS,
        false,
      ]),
    );
    return claim.acquired ? undefined : claim;
  }

  protected async complete(completion: Completion): Promise<boolean> {
    const {
      rows: [finish],
    } = await completion.connection.query<{ finished: boolean }>(
      statement('idempotency_finish', FINISH, [
        SCOPE,
        completion.key,
        completion.owner,
        'completed',
        201,
        STORED_HEADERS,
        completion.body,
        TTL_MS,
      ]),
    );
    return finish.finished;
  }

  protected async release({ key, owner }: Attempt): Promise<void> {
    await this.pool.query(
      statement('idempotency_release', RELEASE, [SCOPE, key, owner, false]),
    );
  }
}
