import { Controller } from '@nestjs/common';
import { createHash } from 'node:crypto';
import type { CreatePaymentDto } from '../../../sample-app/payments/create-payment.dto.js';
import {
  ACQUIRE,
  CLAIM,
  completeStatements,
  READ_HOLDER,
  RELEASE,
  type ClaimHolder,
  type ClaimRow,
  type HolderRow,
} from '../../../src/stores/postgres/postgres-statements.js';
import { CONTENT_TYPE, FloorRoutes, statement } from './floor-routes.js';
import type { Attempt, Completion, Holder } from './floor-routes.js';

/** The module's completion, on the test database's `public` tables. */
const { complete: COMPLETE, deleteSteps: DELETE_STEPS } =
  completeStatements('public');

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
 * the PostgreSQL store (its own, imported: they change together), and
 * nothing else, in a plain route (no interceptor,
 * no lease renewal, no presence, no events; the steps: floor-routes.ts),
 * as named prepared statements (parsed once per connection):
 *
 *   1. the claim (`INSERT … ON CONFLICT DO NOTHING`, reading what holds
 *      the key in the same statement; `idempotency_acquire_generation(...)`
 *      for a key it did not see), with the module's fingerprint of the
 *      request;
 *   2. the fenced completion (an `UPDATE` of the record, then the deletion
 *      of its steps if it has any) in the handler's transaction;
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
    const values: unknown[] = [
      SCOPE,
      attempt.key,
      attempt.fingerprint,
      'POST',
      attempt.path,
      attempt.owner,
      null,
      LEASE_MS,
      TTL_MS,
    ];
    const { rows: claimed } = await this.pool.query<ClaimRow>(
      statement(CLAIM.name, CLAIM.text, values),
    );
    if (claimed.length > 0) {
      return undefined;
    }
    const {
      rows: [held],
    } = await this.pool.query<HolderRow>(
      // The claiming instance: none, the floor has no presence session.
      statement(READ_HOLDER.name, READ_HOLDER.text, [SCOPE, attempt.key, null]),
    );
    if (held) {
      // The bench's keys are new, or held by a live attempt or record: no
      // takeover, which the store would leave to the function.
      const [status, fingerprint, responseStatus] = JSON.parse(
        held.holder,
      ) as ClaimHolder;
      return {
        status,
        fingerprint,
        response_status: responseStatus,
        response_body: held.response_body,
      };
    }
    const {
      rows: [claim],
    } = await this.pool.query<AcquireRow>(
      statement(ACQUIRE.name, ACQUIRE.text, [...values, false]),
    );
    return claim.acquired ? undefined : claim;
  }

  protected async complete(completion: Completion): Promise<boolean> {
    const {
      rows: [finish],
    } = await completion.connection.query<{ has_steps: boolean }>(
      statement(COMPLETE.name, COMPLETE.text, [
        SCOPE,
        completion.key,
        completion.owner,
        'completed',
        201,
        STORED_HEADERS,
        completion.body,
        TTL_MS,
        // Its transaction is TypeORM's, begun without the module's mark
        // (`SET LOCAL idempotency.transaction`, sent with the module's
        // BEGIN): not checked. test/bench/README.md has what the mark costs.
        null,
      ]),
    );
    if (finish?.has_steps) {
      await completion.connection.query(
        statement(DELETE_STEPS.name, DELETE_STEPS.text, [
          SCOPE,
          completion.key,
        ]),
      );
    }
    // No row: the claim is no longer this attempt's.
    return finish !== undefined;
  }

  protected async release({ key, owner }: Attempt): Promise<void> {
    await this.pool.query(
      statement(RELEASE.name, RELEASE.text, [SCOPE, key, owner, false]),
    );
  }
}
