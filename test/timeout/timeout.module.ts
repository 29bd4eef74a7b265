import {
  Body,
  Controller,
  Injectable,
  Module,
  Post,
  Query,
  Res,
  StreamableFile,
} from '@nestjs/common';
import type { ServerResponse } from 'node:http';
import { InjectRepository, TypeOrmModule } from '@nestjs/typeorm';
import type { Repository } from 'typeorm';
import { Idempotent } from '../../src/index.js';
import { Order } from '../fixtures/order.entity.js';
import { Barrier } from '../utils/barrier.js';

/** Holds the first run inside the handler, past the transaction timeout. */
@Injectable()
export class Hang {
  readonly barrier = new Barrier();
  runs = 0;
  /** Reached by the first run once its write after the deadline failed. */
  readonly lateWrite = new Barrier();
  lateError: unknown;
  /** For the statement running at the deadline. */
  readonly sleepEnded = new Barrier();
  sleepError: unknown;
  sleepRuns = 0;
  /** For the client that leaves: held until the test opens it (new for each case). */
  left = new Barrier();
  clientGone = new Barrier();
  /** Runs of `/slow/abandoned`, by reference. */
  readonly abandonedRuns = new Map<string, number>();
  /** For the statement the server cancels. */
  cancelledRuns = 0;
  /** Runs of `/slow/lock-timeout`. */
  lockRuns = 0;
  /** Holds the first run of `/slow/completion` once it wrote, before it returns. */
  readonly returning = new Barrier();
  completionRuns = 0;
}

@Controller('slow')
export class SlowController {
  constructor(
    @InjectRepository(Order) private readonly orders: Repository<Order>,
    private readonly hang: Hang,
  ) {}

  @Post()
  @Idempotent({ transactionTimeout: '500ms' })
  async create(@Body() body: { reference: string }) {
    const run = await this.order(body, ++this.hang.runs);
    if (run === 1) {
      await this.hang.barrier.wait();
      // Long after the deadline: the transaction was rolled back, and this
      // write must fail rather than commit on its own.
      try {
        await this.orders.insert({ reference: body.reference, source: 'late' });
      } catch (error) {
        this.hang.lateError = error;
      }
      void this.hang.lateWrite.wait();
    }
    return { run };
  }

  @Post('sleep')
  @Idempotent({ transactionTimeout: '500ms' })
  async sleep(@Body() body: { reference: string }) {
    const run = await this.order(body, ++this.hang.sleepRuns);
    if (run === 1) {
      // Still running at the deadline: the module cancels it.
      try {
        await this.orders.query('SELECT pg_sleep(30)');
      } catch (error) {
        this.hang.sleepError = error;
        void this.hang.sleepEnded.wait();
        throw error;
      }
    }
    return { run };
  }

  /**
   * Its first run of a reference waits for the test once it wrote; it
   * answers `{ run }` as a body, or as a stream (`?as=stream`).
   */
  @Post('abandoned')
  @Idempotent()
  async abandoned(
    @Body() body: { reference: string },
    @Query('as') as: 'stream' | undefined,
    // Express' response is a ServerResponse; Fastify's reply wraps one.
    @Res({ passthrough: true }) response: { raw?: ServerResponse },
  ) {
    const raw = response.raw ?? (response as ServerResponse);
    // The barrier of this request's case, taken now: the response of an
    // earlier case's request may close late, on a busy machine after the
    // next case began, and must not tell that case its client left.
    const gone = this.hang.clientGone;
    raw.once('close', () => void gone.wait());
    const runs = this.hang.abandonedRuns;
    runs.set(body.reference, (runs.get(body.reference) ?? 0) + 1);
    const run = await this.order(body, runs.get(body.reference)!);
    if (run === 1) {
      await this.hang.left.wait();
    }
    if (as === 'stream') {
      return new StreamableFile(Buffer.from(JSON.stringify({ run })), {
        type: 'application/json',
      });
    }
    return { run };
  }

  @Post('cancelled')
  // Even a policy that stores every error must not store the module's 503.
  @Idempotent({ storeErrors: () => true })
  async cancelled(@Body() body: { reference: string }) {
    const run = await this.order(body, ++this.hang.cancelledRuns);
    if (run === 1) {
      // The server cancels the statement on the handler's own
      // statement_timeout (57014).
      await this.orders.query(`SET LOCAL statement_timeout = '50ms'`);
      await this.orders.query('SELECT pg_sleep(5)');
    }
    return { run };
  }

  @Post('lock-timeout')
  @Idempotent({ storeErrors: () => true })
  async lockTimeout(@Body() body: { reference: string }) {
    const run = await this.order(body, ++this.hang.lockRuns);
    if (run === 1) {
      // The test holds the lock: the server gives up on the handler's own
      // lock_timeout (55P03).
      await this.orders.query(`SET LOCAL lock_timeout = '50ms'`);
      await this.orders.query('SELECT pg_advisory_xact_lock($1)', [LOCKED]);
    }
    return { run };
  }

  @Post('completion')
  @Idempotent({ transactionTimeout: '1s' })
  async completion(@Body() body: { reference: string }) {
    const run = await this.order(body, ++this.hang.completionRuns);
    if (run === 1) {
      // The test locks the key's record now: the completion waits on it.
      await this.hang.returning.wait();
    }
    return { run };
  }

  /** Writes the order of run `run`, and returns `run`. */
  private async order(body: { reference: string }, run: number) {
    await this.orders.insert({
      reference: body.reference,
      source: `run-${run}`,
    });
    return run;
  }
}

/** The advisory lock the test holds while `/slow/lock-timeout` first runs. */
export const LOCKED = 4_343;

@Module({
  imports: [TypeOrmModule.forFeature([Order])],
  controllers: [SlowController],
  providers: [Hang],
})
export class TimeoutTestModule {}
