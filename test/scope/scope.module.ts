import { Body, Controller, Injectable, Module, Post } from '@nestjs/common';
import { Idempotent } from '../../src/index.js';
import { Barrier } from '../utils/barrier.js';

/** Counts handler runs per tenant; one per application. */
@Injectable()
export class TenantRuns {
  readonly perTenant: Record<string, number> = {};
  /** Where `/scoped/held` waits, for the tenants it names. */
  readonly barrier = new Barrier();
  readonly held = new Set<string>();
}

@Controller('scoped')
export class ScopedController {
  constructor(private readonly runs: TenantRuns) {}

  @Post()
  @Idempotent()
  create(@Body() body: { tenant: string; amount: number }) {
    const { perTenant } = this.runs;
    perTenant[body.tenant] = (perTenant[body.tenant] ?? 0) + 1;
    return { tenant: body.tenant, amount: body.amount };
  }

  @Post('held')
  @Idempotent()
  async held(@Body() body: { tenant: string; amount: number }) {
    if (this.runs.held.has(body.tenant)) {
      await this.runs.barrier.wait();
    }
    return this.create(body);
  }
}

@Module({ controllers: [ScopedController], providers: [TenantRuns] })
export class ScopeTestModule {}
