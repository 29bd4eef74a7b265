import { ConflictException, Controller } from '@nestjs/common';
import { createHash } from 'node:crypto';
import type { CreatePaymentDto } from '../../../sample-app/payments/create-payment.dto.js';
import { FloorRoutes, statement } from './floor-routes.js';
import type { Attempt, Completion, Holder } from './floor-routes.js';
import {
  LEAN_CLAIM,
  LEAN_COMPLETE,
  LEAN_HOLDER,
  LEAN_RELEASE,
} from './lean-keys.js';

/** Claims of a key released between the claim and the read of its holder. */
const CLAIMS = 3;

/**
 * The lean floor: the same protocol as the module's on PostgreSQL (a
 * leased claim, the record completed in the handler's transaction, fenced
 * by its owner), as a careful engineer would write it by hand for this
 * route, on a table of its own (lean-keys.ts): no interceptor, no module
 * code, no SQL functions. In the same plain route as the floor
 * (floor-routes.ts: the same steps, the same application code), as named
 * prepared statements (parsed once per connection):
 *
 *   1. the claim, one `INSERT ... ON CONFLICT (key) DO UPDATE ... WHERE`
 *      (the record expired, or the lease); a key it did not take is read
 *      (`SELECT`): what holds it answers the duplicate;
 *   2. the completion `UPDATE ... WHERE key = $1 AND owner = $2` in the
 *      handler's transaction;
 *   3. on a failure, `DELETE ... WHERE key = $1 AND owner = $2`.
 *
 * What the module's PostgreSQL store does beyond it in the database: its
 * functions, and in them the scope, method, path, headers, timestamps,
 * steps and generations, the check of the lease holder's presence. The
 * floor against the lean floor is that; the module against the lean floor
 * is that and all the module does in the application.
 */
@Controller('modes')
export class LeanController extends FloorRoutes {
  protected fingerprint(path: string, dto: CreatePaymentDto): string {
    return createHash('sha256')
      .update(`${path}\n${JSON.stringify(dto)}`)
      .digest('hex');
  }

  protected async claim({
    key,
    fingerprint,
    owner,
  }: Attempt): Promise<Holder | undefined> {
    for (let claims = 0; claims < CLAIMS; claims += 1) {
      const { rowCount } = await this.pool.query(
        statement('bench_lean_claim', LEAN_CLAIM, [key, fingerprint, owner]),
      );
      if (rowCount === 1) {
        return undefined;
      }
      const {
        rows: [holder],
      } = await this.pool.query<Holder>(
        statement('bench_lean_holder', LEAN_HOLDER, [key]),
      );
      if (holder) {
        return holder;
      }
    }
    throw new ConflictException('A request with this key is in progress.');
  }

  protected async complete(completion: Completion): Promise<boolean> {
    const { key, owner, body } = completion;
    const { rowCount } = await completion.connection.query(
      statement('bench_lean_complete', LEAN_COMPLETE, [key, owner, 201, body]),
    );
    return rowCount === 1;
  }

  protected async release({ key, owner }: Attempt): Promise<void> {
    await this.pool.query(
      statement('bench_lean_release', LEAN_RELEASE, [key, owner]),
    );
  }
}
