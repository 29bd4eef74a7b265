import {
  Inject,
  Injectable,
  Optional,
  type OnApplicationBootstrap,
} from '@nestjs/common';
import { InjectDataSource } from '@nestjs/typeorm';
import type { EventEmitter } from 'node:events';
import type { DataSource } from 'typeorm';
import { BENCH_POOL, poolOf } from './bench-pool.js';

/** What {@link PoolGauge.read} reports. */
export interface PoolReading {
  /** The most connections checked out of the pool at once since the last reading. */
  readonly maxHeld: number;
  /** Connections checked out now. */
  readonly held: number;
  /** The pool's size limit (`max`). */
  readonly size: number;
  /**
   * Connection-milliseconds held since the app started: the time each
   * connection spent checked out, summed. Its growth over a load run, a
   * request's share, is how long a request keeps a connection from the
   * others; the pool's `size` divided by it bounds the requests a second
   * the pool can serve.
   */
  readonly heldMs: number;
}

/** The part of a `pg` pool the gauge reads. */
interface PgPool extends EventEmitter {
  readonly totalCount: number;
  readonly idleCount: number;
  readonly options: { readonly max: number };
}

/**
 * Counts the connections the app holds, exactly: its `pg` pool (the one
 * under {@link BENCH_POOL} where the app provides one, as the modes bench's
 * do, else the one under the TypeORM DataSource; the pool the idempotency
 * module borrows from too) says when a connection is checked out
 * (`acquire`) and given back (`release`). A connection counts as held from
 * the one to the other, whether a statement runs on it, a transaction sits
 * open on it or nothing happens on it; nothing in the library is changed or
 * wrapped to know it.
 */
@Injectable()
export class PoolGauge implements OnApplicationBootstrap {
  private readonly pool: PgPool;
  private held = 0;
  private maxHeld = 0;
  /** Connection-milliseconds held until {@link since}. */
  private heldMs = 0;
  private since = performance.now();

  constructor(
    @Optional() @Inject(BENCH_POOL) pool?: PgPool,
    @Optional() @InjectDataSource() dataSource?: DataSource,
  ) {
    const watched = pool ?? (dataSource && poolOf(dataSource));
    if (!watched) {
      throw new Error('The app has no pg pool to watch.');
    }
    this.pool = watched as PgPool;
  }

  onApplicationBootstrap(): void {
    // Whatever is checked out already (normally nothing: the migrations
    // gave their connections back).
    this.held = this.pool.totalCount - this.pool.idleCount;
    this.maxHeld = this.held;
    this.pool.on('acquire', () => {
      this.accrue();
      this.held += 1;
      this.maxHeld = Math.max(this.maxHeld, this.held);
    });
    this.pool.on('release', () => {
      this.accrue();
      this.held -= 1;
    });
  }

  /** Adds the connections held since the last event, for as long. */
  private accrue(): void {
    const now = performance.now();
    this.heldMs += this.held * (now - this.since);
    this.since = now;
  }

  /** The figures since the last reading; the next reading starts from now. */
  read(): PoolReading {
    this.accrue();
    const reading = {
      maxHeld: this.maxHeld,
      held: this.held,
      size: this.pool.options.max,
      heldMs: this.heldMs,
    };
    this.maxHeld = this.held;
    return reading;
  }
}
