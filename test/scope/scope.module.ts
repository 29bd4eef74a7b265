import { Body, Controller, Injectable, Module, Post } from '@nestjs/common';
import { Idempotent } from '../../src/index.js';

/** Counts handler runs per tenant; one per application. */
@Injectable()
export class TenantRuns {
  readonly perTenant: Record<string, number> = {};
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
}

@Module({ controllers: [ScopedController], providers: [TenantRuns] })
export class ScopeTestModule {}
