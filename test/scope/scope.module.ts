import { Body, Controller, Module, Post } from '@nestjs/common';
import { Idempotent } from '../../src/index.js';

export const tenantRuns: Record<string, number> = {};

@Controller('scoped')
export class ScopedController {
  @Post()
  @Idempotent()
  create(@Body() body: { tenant: string; amount: number }) {
    tenantRuns[body.tenant] = (tenantRuns[body.tenant] ?? 0) + 1;
    return { tenant: body.tenant, amount: body.amount };
  }
}

@Module({ controllers: [ScopedController] })
export class ScopeTestModule {}
