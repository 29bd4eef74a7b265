import {
  Controller,
  Injectable,
  Module,
  Post,
  type CallHandler,
  type ExecutionContext,
  type NestInterceptor,
} from '@nestjs/common';
import { APP_INTERCEPTOR } from '@nestjs/core';
import { map, type Observable } from 'rxjs';
import { Idempotent } from '../../src/index.js';
import {
  PLATFORMS,
  send,
  startTestApp,
  type TestApp,
} from '../utils/test-app.js';

/** The envelope many applications wrap every answer in, outside the module's interceptor. */
@Injectable()
class Envelope implements NestInterceptor {
  intercept(
    _context: ExecutionContext,
    next: CallHandler,
  ): Observable<unknown> {
    return next.handle().pipe(map((data: unknown) => ({ data, ok: true })));
  }
}

@Controller('enveloped')
class PaymentsController {
  runs = 0;

  @Post()
  @Idempotent()
  pay() {
    this.runs += 1;
    return { id: `pay_${this.runs}`, amount: 10 };
  }
}

@Module({ controllers: [PaymentsController] })
class EnvelopedModule {}

describe.each(PLATFORMS)(
  'a replay under an interceptor outside the module’s (%s)',
  (platform) => {
    let target: TestApp;

    beforeAll(async () => {
      // In the application's root module, as it is registered there: Nest
      // runs it outside the idempotency module's own interceptor.
      target = await startTestApp({
        imports: [EnvelopedModule],
        providers: [{ provide: APP_INTERCEPTOR, useClass: Envelope }],
        platform,
      });
    });
    afterAll(() => target.close());

    it('is the first answer, byte for byte, marked replayed: not what the outer interceptor makes of nothing', async () => {
      const first = await send(target, '/enveloped', { key: 'env-1' });
      const body = await first.text();
      expect(first.status).toBe(201);
      expect(JSON.parse(body)).toEqual({
        data: { id: 'pay_1', amount: 10 },
        ok: true,
      });
      const again = await send(target, '/enveloped', { key: 'env-1' });
      expect(again.status).toBe(201);
      expect(again.headers.get('idempotent-replayed')).toBe('true');
      expect(await again.text()).toBe(body);
      // Described as the first answer, not as the outer interceptor's own.
      expect(again.headers.get('content-length')).toBe(
        String(Buffer.byteLength(body)),
      );
      expect(again.headers.get('etag')).toBe(first.headers.get('etag'));
      expect(target.app.get(PaymentsController).runs).toBe(1);
    });
  },
);
