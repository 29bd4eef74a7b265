import {
  All,
  Body,
  Controller,
  Get,
  Head,
  HttpCode,
  Injectable,
  Module,
  Options,
  Post,
  Propfind,
  QueryMethod,
  Search,
  StreamableFile,
} from '@nestjs/common';
import { InjectRepository, TypeOrmModule } from '@nestjs/typeorm';
import { Readable } from 'node:stream';
import type { Repository } from 'typeorm';
import { Idempotent } from '../../src/index.js';
import { Order } from '../fixtures/order.entity.js';
import { Barrier } from '../utils/barrier.js';

/** Handler runs by route, and the barrier the `held` route waits at. */
@Injectable()
export class DraftRuns {
  readonly counts: Record<string, number> = {};
  barrier = new Barrier();

  count(route: string): number {
    this.counts[route] = (this.counts[route] ?? 0) + 1;
    return this.counts[route];
  }
}

/** Routes of the points where the IETF draft and a careful client meet. */
@Controller('draft')
export class DraftController {
  constructor(
    private readonly runs: DraftRuns,
    @InjectRepository(Order) private readonly orders: Repository<Order>,
  ) {}

  private async write(route: string, body: unknown) {
    const run = this.runs.count(route);
    await this.orders.insert({ reference: `draft-${route}-${run}` });
    return { run, body: Buffer.isBuffer(body) ? body.toString('hex') : body };
  }

  @Post('notes')
  @Idempotent()
  notes(@Body() body: unknown) {
    return this.write('notes', body);
  }

  @Post('optional')
  @Idempotent({ required: false })
  optional(@Body() body: unknown) {
    return this.write('optional', body);
  }

  /** Its fingerprint never reads the body. */
  @Post('own-fingerprint')
  @Idempotent({ fingerprint: () => 'one request' })
  ownFingerprint(@Body() body: unknown) {
    return this.write('own-fingerprint', body);
  }

  @Post('large')
  @Idempotent({ maxResponseSize: 64 })
  async large() {
    await this.write('large', undefined);
    return { padding: 'x'.repeat(256) };
  }

  @Post('stream')
  @HttpCode(202)
  @Idempotent()
  async stream() {
    const { run } = await this.write('stream', undefined);
    return new StreamableFile(Readable.from([`streamed ${run}\n`]), {
      type: 'text/plain',
    });
  }

  /**
   * A web `Response` of the status the body asks for: the platform sends
   * its own status, not the route's.
   */
  @Post('web-response')
  @Idempotent()
  async webResponse(@Body() body: { status: number }) {
    const { run } = await this.write('web-response', undefined);
    return new Response(JSON.stringify({ run }), {
      status: body.status,
      headers: { 'content-type': 'application/json' },
    });
  }

  /** Waits at the barrier, holding its key. */
  @Post('held')
  @Idempotent()
  async held() {
    this.runs.count('held');
    await this.runs.barrier.wait();
    return { held: true };
  }
}

/**
 * A controller-wide decorator: its routes that change state are idempotent,
 * its reads are left alone.
 */
@Controller('class-wide')
@Idempotent()
export class ClassWideController {
  constructor(private readonly runs: DraftRuns) {}

  @Get()
  list() {
    return { run: this.runs.count('class-wide/list') };
  }

  @Search()
  search() {
    return { run: this.runs.count('class-wide/search') };
  }

  @QueryMethod()
  query() {
    return { run: this.runs.count('class-wide/query') };
  }

  @Post()
  create() {
    return { run: this.runs.count('class-wide/create') };
  }
}

@Module({
  imports: [TypeOrmModule.forFeature([Order])],
  controllers: [DraftController, ClassWideController],
  providers: [DraftRuns],
})
export class DraftContractModule {}

@Controller('reads')
class GetReadController {
  @Get()
  @Idempotent()
  find() {
    return {};
  }
}

@Controller('reads')
class HeadReadController {
  @Head()
  @Idempotent()
  probe() {
    return {};
  }
}

@Controller('reads')
class OptionsReadController {
  @Options()
  @Idempotent()
  allowed() {
    return {};
  }
}

@Controller('reads')
class AllReadController {
  @All()
  @Idempotent()
  any() {
    return {};
  }
}

@Controller('reads')
class SearchReadController {
  @Search()
  @Idempotent()
  search() {
    return {};
  }
}

@Controller('reads')
class PropfindReadController {
  @Propfind()
  @Idempotent()
  properties() {
    return {};
  }
}

@Controller('reads')
class QueryReadController {
  @QueryMethod()
  @Idempotent()
  query() {
    return {};
  }
}

/** A controller-wide decorator with nothing but reads to act on. */
@Controller('reports')
@Idempotent()
export class ReadsOnlyController {
  @Get()
  list() {
    return [];
  }

  @Search()
  search() {
    return [];
  }
}

/** A module whose one controller decorates a read, by the read's method. */
export const READ_MODULES = {
  GET: ['GetReadController.find', GetReadController],
  HEAD: ['HeadReadController.probe', HeadReadController],
  OPTIONS: ['OptionsReadController.allowed', OptionsReadController],
  SEARCH: ['SearchReadController.search', SearchReadController],
  PROPFIND: ['PropfindReadController.properties', PropfindReadController],
  QUERY: ['QueryReadController.query', QueryReadController],
  ALL: ['AllReadController.any', AllReadController],
} as const;

/** The module of `controller` alone. */
export function moduleOf(controller: abstract new () => unknown) {
  @Module({ controllers: [controller as new () => unknown] })
  class ReadModule {}
  return ReadModule;
}
