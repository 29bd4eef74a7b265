import {
  Body,
  Controller,
  Delete,
  Headers,
  HttpCode,
  Injectable,
  Module,
  Param,
  Patch,
  Post,
  Put,
  Res,
} from '@nestjs/common';
import { InjectRepository, TypeOrmModule } from '@nestjs/typeorm';
import type { Repository } from 'typeorm';
import { Idempotent } from '../../src/index.js';
import { Order } from '../fixtures/order.entity.js';

/** Header naming the idempotency scope of a request (one per scenario). */
export const SCOPE_HEADER = 'x-fuzz-scope';
/** Header carrying the fuzzer's id of a request, e.g. `s12/7`. */
export const ID_HEADER = 'x-fuzz-id';
/** Response header set by the handlers: the number of the run. */
export const RUN_HEADER = 'x-fuzz-run';

/**
 * The routes of the fuzzed application: method, route template and the
 * status of a first execution.
 */
export const FUZZ_ROUTES = {
  POST: { template: '/fuzz/items', status: 201 },
  PUT: { template: '/fuzz/items/:id', status: 200 },
  PATCH: { template: '/fuzz/items/:id', status: 200 },
  DELETE: { template: '/fuzz/items/:id', status: 204 },
} as const;

/** The `scope` option of the fuzzed app: one scope per scenario, from a header. */
export const fuzzScope = (request: {
  headers: Record<string, string | string[] | undefined>;
}): string => {
  const scope = request.headers[SCOPE_HEADER];
  return typeof scope === 'string' && scope.length > 0 ? scope : 'unscoped';
};

/** Every handler run, in order: the `x-fuzz-id` of its request. */
@Injectable()
export class HandlerRuns {
  readonly ids: string[] = [];

  record(id: string | undefined): number {
    this.ids.push(id ?? '<no id>');
    return this.ids.length;
  }
}

/** Express's `Response` and Fastify's `FastifyReply` both have `header()`. */
interface PlatformReply {
  header(name: string, value: string): unknown;
}

@Controller('fuzz/items')
@Idempotent()
export class FuzzController {
  constructor(
    private readonly runs: HandlerRuns,
    @InjectRepository(Order) private readonly orders: Repository<Order>,
  ) {}

  @Post()
  create(
    @Body() body: unknown,
    @Headers() headers: Record<string, string | undefined>,
    @Res({ passthrough: true }) reply: PlatformReply,
  ) {
    return this.run('POST', undefined, body, headers, reply);
  }

  @Put(':id')
  @HttpCode(200)
  replace(
    @Param('id') id: string,
    @Body() body: unknown,
    @Headers() headers: Record<string, string | undefined>,
    @Res({ passthrough: true }) reply: PlatformReply,
  ) {
    return this.run('PUT', id, body, headers, reply);
  }

  @Patch(':id')
  @HttpCode(200)
  update(
    @Param('id') id: string,
    @Body() body: unknown,
    @Headers() headers: Record<string, string | undefined>,
    @Res({ passthrough: true }) reply: PlatformReply,
  ) {
    return this.run('PATCH', id, body, headers, reply);
  }

  @Delete(':id')
  @HttpCode(204)
  async remove(
    @Param('id') id: string,
    @Body() body: unknown,
    @Headers() headers: Record<string, string | undefined>,
    @Res({ passthrough: true }) reply: PlatformReply,
  ): Promise<void> {
    await this.run('DELETE', id, body, headers, reply);
  }

  /**
   * Records the run, writes one order through the handler's transaction and
   * answers something unique to this run: a replay that ran the handler
   * again would differ.
   */
  private async run(
    method: string,
    id: string | undefined,
    body: unknown,
    headers: Record<string, string | undefined>,
    reply: PlatformReply,
  ) {
    const requestId = headers[ID_HEADER];
    const run = this.runs.record(requestId);
    await this.orders.save(
      this.orders.create({
        reference: requestId ?? '<no id>',
        source: headers[SCOPE_HEADER] ?? 'unscoped',
      }),
    );
    reply.header(RUN_HEADER, String(run));
    // The body is not echoed: serializing a deeply nested one would make
    // this handler, not the module, answer 500.
    return {
      run,
      request: requestId,
      method,
      id,
      body: Array.isArray(body)
        ? 'array'
        : body === null
          ? 'null'
          : typeof body,
    };
  }
}

@Module({
  imports: [TypeOrmModule.forFeature([Order])],
  controllers: [FuzzController],
  providers: [HandlerRuns],
})
export class FuzzTestModule {}
