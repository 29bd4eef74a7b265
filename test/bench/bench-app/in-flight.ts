import {
  Injectable,
  type CallHandler,
  type ExecutionContext,
  type NestInterceptor,
} from '@nestjs/common';
import { finalize, type Observable } from 'rxjs';

/**
 * Counts the requests the app is still handling, so that the bench can wait
 * for the stragglers of a load run (whose client has gone, but whose handler
 * still runs and writes) before it measures or counts the next thing. A
 * global interceptor: it wraps the idempotency module's, so a request counts
 * until its transaction has ended.
 */
@Injectable()
export class InFlight implements NestInterceptor {
  private handling = 0;

  /** Requests being handled, the caller's own excluded. */
  get others(): number {
    return this.handling - 1;
  }

  intercept(
    _context: ExecutionContext,
    next: CallHandler,
  ): Observable<unknown> {
    this.handling += 1;
    return next.handle().pipe(
      finalize(() => {
        this.handling -= 1;
      }),
    );
  }
}
