import { Controller, HttpCode, Post } from '@nestjs/common';
import { InFlight } from './in-flight.js';
import { PoolGauge, type PoolReading } from './pool-gauge.js';

/**
 * `POST /bench/pool` for the apps of the modes bench, which have none of
 * BenchController's other routes: what `quiesce()` waits on.
 */
@Controller('bench')
export class AppStateController {
  constructor(
    private readonly pool: PoolGauge,
    private readonly inFlight: InFlight,
  ) {}

  /**
   * The most pooled connections held at once since the last call, and the
   * requests still being handled (this one excluded).
   */
  @Post('pool')
  @HttpCode(200)
  readPool(): PoolReading & { inFlight: number } {
    return { ...this.pool.read(), inFlight: this.inFlight.others };
  }
}
