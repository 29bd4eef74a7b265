import { IntrinsicException } from '@nestjs/common';

/**
 * @internal A refusal of the module that the client caused (a 4xx: a key
 * missing, malformed or reused, a duplicate still running, a result not
 * replayable), as a mutation throws it.
 *
 * Not a `GraphQLError`: Nest's handler of exceptions outside HTTP
 * (`ExternalExceptionFilter`, which every resolver runs under) logs at
 * ERROR, with its stack, any error thrown by a resolver except an
 * `IntrinsicException` (which `HttpException` is, and why REST does not log
 * these). GraphQL makes the same `GraphQLError` of it for the client: the
 * executor wraps what a resolver throws in a located `GraphQLError` with its
 * message, and with its `extensions` when it has them. Neither `status` nor
 * `response` is set: Apollo's `autoTransformHttpErrors` would take it for
 * an `HttpException` and replace its `code`.
 */
export class GraphqlRefusalError extends IntrinsicException {
  /** Copied by GraphQL into the error the client gets. */
  readonly extensions: Record<string, unknown>;

  constructor(message: string, extensions: Record<string, unknown>) {
    super(message);
    this.name = 'GraphqlRefusalError';
    this.extensions = extensions;
  }
}
