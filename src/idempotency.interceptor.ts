import {
  Injectable,
  type CallHandler,
  type ExecutionContext,
  type NestInterceptor,
} from '@nestjs/common';
import { defer, type Observable } from 'rxjs';
import { IdempotencyRoutes } from './idempotency.routes.js';
import { IdempotencyHttp } from './http/idempotency.http.js';
import { IdempotencyGraphql } from './graphql/idempotency.graphql.js';
import { IdempotencyMessages } from './messages/idempotency.messages.js';

/**
 * The global interceptor that `IdempotencyModule` binds. A handler decorated
 * with `@Idempotent()` goes to the adapter of its context type (an HTTP
 * request, a GraphQL mutation, a message); every other handler passes
 * through untouched. How a key, a scope or a fingerprint is found is set by
 * the options (`key`, `scope`, `fingerprint`), not by subclassing.
 */
@Injectable()
export class IdempotencyInterceptor implements NestInterceptor {
  constructor(
    private readonly routes: IdempotencyRoutes,
    private readonly http: IdempotencyHttp,
    private readonly graphql: IdempotencyGraphql,
    private readonly messages: IdempotencyMessages,
  ) {}

  intercept(context: ExecutionContext, next: CallHandler): Observable<unknown> {
    const type = context.getType<string>();
    if (type !== 'http' && type !== 'rpc' && type !== 'graphql') {
      return next.handle();
    }
    const route = this.routes.get(
      context.getClass(),
      context.getHandler() as (...args: never[]) => unknown,
    );
    if (!route) {
      return next.handle();
    }
    return defer(() =>
      type === 'http'
        ? this.http.execute(context, next, route)
        : type === 'graphql'
          ? this.graphql.execute(context, next, route)
          : this.messages.execute(context, next, route),
    );
  }
}
