import {
  Body,
  Controller,
  Header,
  HttpCode,
  Module,
  Post,
  Res,
} from '@nestjs/common';
import type { Response } from 'express';
import { Idempotent } from '../../src/index.js';

/** Counts handler runs, per route. */
export const runs = { json: 0, text: 0, empty: 0, other: 0 };

@Controller('replay')
@Idempotent()
export class ReplayController {
  @Post('json')
  @Header('X-Custom', 'yes')
  @Header('Cache-Control', 'no-store')
  json(
    @Body() body: Record<string, unknown>,
    @Res({ passthrough: true }) res: Response,
  ) {
    runs.json += 1;
    res.cookie('session', `s${runs.json}`);
    // Unique per run: a replay that ran the handler again would differ.
    return {
      run: runs.json,
      at: process.hrtime.bigint().toString(),
      echo: body,
      unicode: 'é€😀',
    };
  }

  @Post('text')
  @HttpCode(202)
  text() {
    runs.text += 1;
    return `queued #${runs.text}`;
  }

  @Post('empty')
  @HttpCode(204)
  empty() {
    runs.empty += 1;
  }

  @Post('other')
  other(@Body() body: Record<string, unknown>) {
    runs.other += 1;
    return body;
  }
}

@Module({ controllers: [ReplayController] })
export class ReplayTestModule {}
