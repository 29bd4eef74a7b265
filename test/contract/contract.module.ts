import {
  BadRequestException,
  Body,
  Catch,
  Controller,
  Header,
  HttpCode,
  HttpException,
  Injectable,
  Module,
  Param,
  Post,
  Query,
  Res,
  ServiceUnavailableException,
  StreamableFile,
  UseFilters,
  type ArgumentsHost,
  type ExceptionFilter,
} from '@nestjs/common';
import { HttpAdapterHost } from '@nestjs/core';
import { InjectRepository, TypeOrmModule } from '@nestjs/typeorm';
import { createHash } from 'node:crypto';
import type { ServerResponse } from 'node:http';
import { Readable } from 'node:stream';
import type { Repository } from 'typeorm';
import { Idempotent } from '../../src/index.js';
import { Order } from '../fixtures/order.entity.js';
import { Barrier } from '../utils/barrier.js';

/** Handler runs by route, and the barrier the `held` routes wait at. */
@Injectable()
export class Runs {
  readonly counts: Record<string, number> = {};
  barrier = new Barrier();

  count(route: string): number {
    this.counts[route] = (this.counts[route] ?? 0) + 1;
    return this.counts[route];
  }
}

type Payload = Record<string, unknown>;
/** Express's response is a ServerResponse; Fastify's reply carries one. */
type PlatformResponse = { raw?: ServerResponse };

@Controller('keys')
export class KeysController {
  constructor(private readonly runs: Runs) {}

  @Post('default')
  @Idempotent()
  plain(@Body() body: Payload) {
    return { run: this.runs.count('keys/default'), body };
  }

  @Post('uuid')
  @Idempotent({
    keyValidation: {
      minLength: 36,
      maxLength: 36,
      pattern: /^[0-9a-f-]+$/,
      validate: (key) => key[14] === '4',
    },
  })
  uuid() {
    return { run: this.runs.count('keys/uuid') };
  }

  @Post('optional')
  @Idempotent({ required: false })
  optional(@Body() body: Payload) {
    return { run: this.runs.count('keys/optional'), body };
  }

  @Post('derived')
  @Idempotent({
    key: (context) => {
      const body = context.switchToHttp().getRequest<{ body: Payload }>().body;
      return createHash('sha256')
        .update(`${String(body.userId)}:${String(body.amount)}`)
        .digest('hex');
    },
  })
  derived(@Body() body: Payload) {
    return { run: this.runs.count('keys/derived'), body };
  }

  /** Its key is the body's `orderId`: a request without one has none. */
  @Post('derived-or-none')
  @Idempotent({
    key: (context) =>
      context.switchToHttp().getRequest<{ body: Payload }>().body.orderId as
        string | undefined,
  })
  derivedOrNone(@Body() body: Payload) {
    return { run: this.runs.count('keys/derived-or-none'), body };
  }

  /** Its key is the body's `orderId`, any text the rules let through. */
  @Post('any-text')
  @Idempotent({
    key: (context) =>
      context.switchToHttp().getRequest<{ body: Payload }>().body.orderId as
        string | undefined,
    keyValidation: { pattern: /^[\s\S]+$/, maxLength: 1024 },
  })
  anyText(@Body() body: Payload) {
    return { run: this.runs.count('keys/any-text'), body };
  }
}

@Controller('fingerprint')
export class FingerprintController {
  constructor(
    private readonly runs: Runs,
    @InjectRepository(Order) private readonly orders: Repository<Order>,
  ) {}

  @Post('include')
  @Idempotent({ fingerprint: { include: ['amount', 'currency'] } })
  include(@Body() body: Payload) {
    return { run: this.runs.count('fingerprint/include'), body };
  }

  @Post('exclude')
  @Idempotent({ fingerprint: { exclude: ['sentAt'] } })
  exclude(@Body() body: Payload) {
    return { run: this.runs.count('fingerprint/exclude'), body };
  }

  @Post('custom')
  @Idempotent({
    fingerprint: (context) =>
      String(
        context.switchToHttp().getRequest<{ body: Payload }>().body.amount,
      ),
  })
  custom(@Body() body: Payload) {
    return { run: this.runs.count('fingerprint/custom'), body };
  }

  @Post('held')
  @Idempotent()
  async held(@Body() body: Payload) {
    const run = this.runs.count('fingerprint/held');
    await this.orders.insert({ reference: String(body.reference) });
    await this.runs.barrier.wait();
    return { run, body };
  }

  @Post('held-wait')
  @Idempotent({ concurrency: 'wait' })
  async heldWait(@Body() body: Payload) {
    const run = this.runs.count('fingerprint/held-wait');
    await this.runs.barrier.wait();
    return { run, body };
  }
}

/** Routes whose requests differ only by path parameters or query. */
@Controller('accounts')
export class AccountsController {
  constructor(
    private readonly runs: Runs,
    @InjectRepository(Order) private readonly orders: Repository<Order>,
  ) {}

  @Post(':id/refund')
  @Idempotent()
  async refund(@Param('id') id: string, @Query() query: Payload) {
    const run = this.runs.count('accounts/refund');
    await this.orders.insert({ reference: `refund-${id}` });
    await this.runs.barrier.wait();
    return { refunded: id, run, query };
  }

  @Post(':id/search')
  @Idempotent({ fingerprint: { exclude: ['query._'] } })
  search(@Param('id') id: string, @Query() query: Payload) {
    return { run: this.runs.count('accounts/search'), id, query };
  }
}

/** Rewrites every error into the application's own shape, as filters do. */
@Catch(HttpException)
export class EnvelopeFilter implements ExceptionFilter {
  constructor(private readonly adapterHost: HttpAdapterHost) {}

  catch(exception: HttpException, host: ArgumentsHost) {
    const status = exception.getStatus();
    this.adapterHost.httpAdapter.reply(
      host.switchToHttp().getResponse(),
      { error: { code: `E${status}`, message: exception.message } },
      status,
    );
  }
}

@Controller('errors')
export class ErrorsController {
  constructor(
    private readonly runs: Runs,
    @InjectRepository(Order) private readonly orders: Repository<Order>,
  ) {}

  private async failWith(
    route: string,
    reference: string,
    error: (run: number) => Error,
  ): Promise<never> {
    const run = this.runs.count(route);
    await this.orders.insert({ reference });
    throw error(run);
  }

  @Post('declined')
  @Idempotent({ storeErrors: true })
  declined(@Body() body: Payload) {
    return this.failWith(
      'errors/declined',
      String(body.reference),
      (run) => new BadRequestException(`declined #${run}`),
    );
  }

  @Post('crashed')
  @Idempotent({ storeErrors: true })
  crashed(@Body() body: Payload) {
    return this.failWith(
      'errors/crashed',
      String(body.reference),
      (run) => new Error(`crash #${run}`),
    );
  }

  @Post('unavailable')
  @Idempotent({ storeErrors: (status) => status === 503 })
  unavailable(@Body() body: Payload) {
    return this.failWith(
      'errors/unavailable',
      String(body.reference),
      (run) => new ServiceUnavailableException(`gateway down #${run}`),
    );
  }

  /** Throws the `status` of its path: 408, 425 or 429 ask for a retry later. */
  @Post('retry-later/:status')
  @Idempotent({ storeErrors: true })
  retryLater(@Param('status') status: string, @Body() body: Payload) {
    return this.failWith(
      `errors/retry-later/${status}`,
      String(body.reference),
      (run) => new HttpException(`come back later #${run}`, Number(status)),
    );
  }

  /** The same under a policy that stores every error it is asked about. */
  @Post('retry-later-any-policy/:status')
  @Idempotent({ storeErrors: () => true })
  retryLaterAnyPolicy(@Param('status') status: string, @Body() body: Payload) {
    return this.failWith(
      `errors/retry-later-any-policy/${status}`,
      String(body.reference),
      (run) => new HttpException(`come back later #${run}`, Number(status)),
    );
  }

  @Post('filtered')
  @Idempotent({ storeErrors: true })
  @UseFilters(EnvelopeFilter)
  filtered(@Body() body: Payload) {
    return this.failWith(
      'errors/filtered',
      String(body.reference),
      (run) => new BadRequestException(`filtered #${run}`),
    );
  }
}

@Controller('responses')
export class ResponsesController {
  constructor(
    private readonly runs: Runs,
    @InjectRepository(Order) private readonly orders: Repository<Order>,
  ) {}

  @Post('stream')
  @Idempotent()
  async stream(@Body() body: Payload) {
    const run = this.runs.count('responses/stream');
    await this.orders.insert({ reference: String(body.reference) });
    return new StreamableFile(
      Readable.from([`chunk-1 of run ${run}\n`, 'chunk-2\n']),
      {
        type: 'text/plain',
      },
    );
  }

  @Post('stream-commit-refused')
  @Idempotent()
  async streamCommitRefused(@Body() body: Payload) {
    this.runs.count('responses/stream-commit-refused');
    await this.orders.insert({ reference: String(body.reference) });
    // Accepted now, refused at COMMIT when the test has made the constraint
    // of `commit_checks` deferred and unique.
    await this.orders.query(`INSERT INTO commit_checks (n) VALUES (1), (1)`);
    return new StreamableFile(Readable.from(['streamed\n']), {
      type: 'text/plain',
    });
  }

  /**
   * Streams an error answer that asks the client to come back later (a
   * `Retry-After`), as a returned 4xx with one would be.
   */
  @Post('stream-retry-later')
  @Idempotent()
  @HttpCode(403)
  @Header('Retry-After', '30')
  async streamRetryLater(@Body() body: Payload) {
    const run = this.runs.count('responses/stream-retry-later');
    await this.orders.insert({ reference: String(body.reference) });
    return new StreamableFile(Readable.from([`not yet, run ${run}\n`]), {
      type: 'text/plain',
    });
  }

  @Post('large')
  @Idempotent({ maxResponseSize: 1024 })
  async large(@Body() body: Payload) {
    const run = this.runs.count('responses/large');
    await this.orders.insert({ reference: String(body.reference) });
    return { run, padding: 'x'.repeat(2048) };
  }

  /** Returns a 5xx its status decorator sets, rather than throwing it. */
  @Post('returned/http-code-500')
  @Idempotent()
  @HttpCode(500)
  returnedHttpCode500(@Body() body: Payload) {
    return this.returned('responses/returned/http-code-500', body);
  }

  @Post('returned/http-code-503')
  @Idempotent()
  @HttpCode(503)
  returnedHttpCode503(@Body() body: Payload) {
    return this.returned('responses/returned/http-code-503', body);
  }

  /** Returns a 429 its status decorator sets, rather than throwing it. */
  @Post('returned/http-code-429')
  @Idempotent()
  @HttpCode(429)
  returnedHttpCode429(@Body() body: Payload) {
    return this.returned('responses/returned/http-code-429', body);
  }

  /**
   * Returns the 5xx, or the 408, 425 or 429, of its path, set on the
   * platform's response.
   */
  @Post('returned/res-status/:status')
  @Idempotent()
  returnedResStatus(
    @Param('status') status: string,
    @Body() body: Payload,
    @Res({ passthrough: true }) res: { status(code: number): unknown },
  ) {
    res.status(Number(status));
    return this.returned(`responses/returned/res-status/${status}`, body);
  }

  private async returned(route: string, body: Payload) {
    const run = this.runs.count(route);
    await this.orders.insert({ reference: String(body.reference) });
    return { run };
  }

  @Post('headers-deny')
  @Idempotent({ replayHeaders: { deny: ['X-Request-Id'] } })
  headersDeny(@Res({ passthrough: true }) res: PlatformResponse) {
    return this.withHeaders('responses/headers-deny', res);
  }

  @Post('headers-allow')
  @Idempotent({ replayHeaders: { allow: ['x-kept'] } })
  headersAllow(@Res({ passthrough: true }) res: PlatformResponse) {
    return this.withHeaders('responses/headers-allow', res);
  }

  /** Headers set by the handler itself: only a stored response has them on replay. */
  private withHeaders(route: string, res: PlatformResponse) {
    const run = this.runs.count(route);
    const raw = res.raw ?? (res as ServerResponse);
    raw.setHeader('X-Request-Id', `req-${run}`);
    raw.setHeader('X-Kept', `kept-${run}`);
    return { run };
  }
}

@Module({
  imports: [TypeOrmModule.forFeature([Order])],
  controllers: [
    KeysController,
    FingerprintController,
    AccountsController,
    ErrorsController,
    ResponsesController,
  ],
  providers: [Runs],
})
export class ContractTestModule {}
