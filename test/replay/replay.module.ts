import {
  Body,
  Controller,
  Header,
  HttpCode,
  Injectable,
  Module,
  Post,
  Res,
} from '@nestjs/common';
import { HttpAdapterHost } from '@nestjs/core';
import { Idempotent } from '../../src/index.js';

/** Counts handler runs, per route; one per application. */
@Injectable()
export class ReplayRuns {
  json = 0;
  text = 0;
  empty = 0;
  other = 0;
}

@Controller('replay')
@Idempotent()
export class ReplayController {
  constructor(
    private readonly runs: ReplayRuns,
    private readonly adapterHost: HttpAdapterHost,
  ) {}

  @Post('json')
  @Header('X-Custom', 'yes')
  @Header('Cache-Control', 'no-store')
  json(
    @Body() body: Record<string, unknown>,
    // An Express `Response` or a Fastify `FastifyReply`: the adapter sets the
    // cookie on either.
    @Res({ passthrough: true }) res: unknown,
  ) {
    this.runs.json += 1;
    this.adapterHost.httpAdapter.setCookie(
      res,
      'session',
      `s${this.runs.json}`,
    );
    // Unique per run: a replay that ran the handler again would differ.
    return {
      run: this.runs.json,
      at: process.hrtime.bigint().toString(),
      echo: body,
      unicode: 'é€😀',
    };
  }

  @Post('text')
  @HttpCode(202)
  text() {
    this.runs.text += 1;
    return `queued #${this.runs.text}`;
  }

  @Post('empty')
  @HttpCode(204)
  empty() {
    this.runs.empty += 1;
  }

  @Post('other')
  other(@Body() body: Record<string, unknown>) {
    this.runs.other += 1;
    return body;
  }
}

@Module({ controllers: [ReplayController], providers: [ReplayRuns] })
export class ReplayTestModule {}
