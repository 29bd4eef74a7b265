import type { FactoryProvider } from '@nestjs/common';
import {
  HTTP_CODE_METADATA,
  METHOD_METADATA,
  PATH_METADATA,
} from '@nestjs/common/constants.js';
import { RequestMethod } from '@nestjs/common/enums/request-method.enum.js';
import { DiscoveryService, MetadataScanner } from '@nestjs/core';
import { IDEMPOTENCY_RESOLVED_OPTIONS } from '../idempotency.tokens.js';
import { IDEMPOTENT_BODY_OMITTED_HEADER } from '../client/client.constants.js';
import type { ResolvedIdempotencyOptions } from '../idempotency.options.js';
import type { ResolvedRouteOptions } from '../core/executor.options.js';
import { IdempotencyRoutes } from '../idempotency.routes.js';
import { problemType } from '../exceptions/idempotency-http.exception.js';
import { loadOptionalPeer } from '../core/optional-peer.js';

/** What the module uses of `@nestjs/swagger`. */
interface Swagger {
  DECORATORS: {
    API_PARAMETERS: string;
    API_HEADERS: string;
    API_RESPONSE: string;
  };
  ApiHeader(options: Record<string, unknown>): MethodDecorator;
}

/** A response as `@ApiResponse()` stores it, by status. */
type ResponseEntry = { description?: string } & Record<string, unknown>;

/** A header parameter as `@ApiHeader()` stores it. */
interface Parameter {
  name?: string;
  in?: string;
  description?: string;
}

/**
 * The static of a class compiled with the `@nestjs/swagger` CLI plugin:
 * the metadata the plugin inferred for each method (its response type).
 */
const PLUGIN_METADATA_FACTORY = '_OPENAPI_METADATA_FACTORY';

/** The body of every answer of the module (`IdempotencyProblem`). */
function problemSchema(typeBase: string | undefined) {
  return {
    type: 'object',
    required: ['type', 'title', 'status', 'detail'],
    properties: {
      type: {
        type: 'string',
        description: 'URI of the kind of problem',
        example: problemType('request-in-progress', typeBase),
      },
      title: { type: 'string', description: 'Summary of the kind of problem' },
      status: { type: 'integer', description: 'The HTTP status code' },
      detail: { type: 'string', description: 'What happened, for the client' },
      key: {
        type: 'string',
        description: 'The idempotency key of the request',
      },
    },
  };
}

const RETRY_AFTER = {
  'Retry-After': {
    description: 'Seconds to wait before retrying with the same key',
    schema: { type: 'integer', minimum: 0 },
  },
};

function problem(
  description: string,
  typeBase: string | undefined,
  retry = false,
): ResponseEntry {
  return {
    description,
    content: {
      'application/problem+json': { schema: problemSchema(typeBase) },
    },
    ...(retry ? { headers: RETRY_AFTER } : {}),
  };
}

/** The names the module's answers carry, as the module options give them. */
interface Names {
  /** The key header (`headerName`). */
  readonly header: string;
  /** The replay header (`replayHeaderName`). */
  readonly replayed: string;
  /** `problemTypeBaseUrl`. */
  readonly typeBase: string | undefined;
  /** The expiry header (`expiresHeader`), when on. */
  readonly expires: string | undefined;
}

/** `ms` as a person reads a duration: `24 hours`, `90 seconds`, `1500 ms`. */
export function readableDuration(ms: number): string {
  const units: ReadonlyArray<readonly [number, string]> = [
    [86_400_000, 'day'],
    [3_600_000, 'hour'],
    [60_000, 'minute'],
    [1_000, 'second'],
  ];
  for (const [size, unit] of units) {
    if (ms >= size && ms % size === 0) {
      const count = ms / size;
      return `${count} ${unit}${count === 1 ? '' : 's'}`;
    }
  }
  return `${ms} ms`;
}

/** The module's own answers on a decorated route, by status. */
function moduleResponses(
  options: ResolvedRouteOptions,
  names: Names,
): Record<string, ResponseEntry> {
  const from = options.key
    ? 'The idempotency key'
    : `The ${names.header} header`;
  const type = (slug: string) => `\`${problemType(slug, names.typeBase)}\``;
  const responses: Record<string, ResponseEntry> = {
    400: problem(
      `${from} is ${options.required ? 'missing or ' : ''}malformed (${options.required ? `${type('missing-key')} or ` : ''}${type('invalid-key')}). Nothing ran.`,
      names.typeBase,
    ),
    409: problem(
      `A request with the same key is still running (${type('request-in-progress')}). Nothing ran: retry with the same key after \`Retry-After\` seconds.`,
      names.typeBase,
      true,
    ),
    415: problem(
      `The request carries a body the application does not parse, so it cannot be told from another request with the same key (${type('unreadable-body')}). Nothing ran: send the body in a format the route parses.`,
      names.typeBase,
    ),
    422: problem(
      `The key was used for another request (${type('key-reused')}). Nothing ran: use a new key for a new request.`,
      names.typeBase,
    ),
    503: problem(
      `The idempotency record could not be claimed or committed, or the request ran past its deadline (${type('unavailable')}). Nothing of it committed: retry with the same key after \`Retry-After\` seconds.`,
      names.typeBase,
      true,
    ),
  };
  if (typeof options.fingerprint === 'function') {
    // The route's own fingerprint never reads the body for the module.
    delete responses[415];
  }
  return responses;
}

/** The headers of a replayed success, as OpenAPI documents a response's. */
function replayHeaders(names: Names): Record<string, unknown> {
  return {
    ...(names.expires === undefined
      ? {}
      : {
          [names.expires]: {
            description:
              "Until when the key of this request is kept (an HTTP-date): a request with the same key after then runs as a new request. A replay carries the first response's.",
            schema: { type: 'string' },
          },
        }),
    [names.replayed]: {
      description:
        'Present on a replay: the request ran before with the same key, and this is its response (the handler did not run again).',
      schema: { type: 'string', enum: ['true'] },
    },
    [IDEMPOTENT_BODY_OMITTED_HEADER]: {
      description: `Present on a replay whose original body was too large to store or was streamed: the status is the original one, and the body is empty.`,
      schema: { type: 'string', enum: ['true'] },
    },
  };
}

/**
 * A route's own description, ended as a sentence (a period added unless it
 * ends with punctuation already) so that another can follow it.
 */
function asSentence(description: unknown): string | undefined {
  if (typeof description !== 'string') {
    return undefined;
  }
  const text = description.trimEnd();
  return text === '' || /[.!?:;…)"'`]$/.test(text) ? text : `${text}.`;
}

/** How long a key is kept (the expiration policy the draft asks to publish). */
function expiryPolicy(options: ResolvedRouteOptions, names: Names): string {
  return `A key is kept for ${readableDuration(options.ttlMs)} (\`ttl\`) after its request${names.expires === undefined ? '' : ` (the response's \`${names.expires}\` header says until when)`}: a request with it after that runs as a new request.`;
}

/** The header parameter of the key, as `@ApiHeader()` takes it. */
function keyHeader(
  options: ResolvedRouteOptions,
  names: Names,
): Record<string, unknown> {
  const { minLength, maxLength, pattern } = options.keyValidation;
  // A schema's `pattern` has no flags: a pattern whose flags change what it
  // matches (`i`, `m`, `s`) or how it reads (`v`) is said in the
  // description instead.
  const plain = !/[imsv]/.test(pattern.flags);
  const matches = new RegExp(
    pattern.source,
    pattern.flags.replace(/[gy]/g, ''),
  );
  return {
    name: names.header,
    required: options.required,
    description: `Unique key of this operation, such as a UUID, as a token or a quoted string (RFC 8941)${plain ? '' : `, matching \`${String(pattern)}\``}. A retry with the same key and the same request gets the first response again, with \`${names.replayed}: true\`, and never runs twice (a response that was streamed or too large to store comes back with its status, an empty body and \`${IDEMPOTENT_BODY_OMITTED_HEADER}: true\`). ${expiryPolicy(options, names)}${options.required ? '' : ' Without it, the request runs without idempotency.'}`,
    schema: {
      type: 'string',
      minLength,
      maxLength,
      ...(plain ? { pattern: pattern.source } : {}),
    },
    // Only a key the route takes.
    ...(EXAMPLE_KEY.length >= minLength &&
    EXAMPLE_KEY.length <= maxLength &&
    matches.test(EXAMPLE_KEY)
      ? { example: EXAMPLE_KEY }
      : {}),
  };
}

/** The key the header's documentation shows, where the route takes it. */
const EXAMPLE_KEY = '8e03978e-40d5-43e8-bc93-6894a57f9324';

/** The status Nest answers a handler with, as `@nestjs/swagger` infers it. */
function defaultStatus(handler: object): number {
  const code = Reflect.getMetadata(HTTP_CODE_METADATA, handler) as
    number | undefined;
  if (code !== undefined) {
    return code;
  }
  return Reflect.getMetadata(METHOD_METADATA, handler) === RequestMethod.POST
    ? 201
    : 200;
}

/**
 * The responses the route documents before the module adds its own: its
 * `@ApiResponse()`s; without any, the response the CLI plugin inferred, or
 * the one `@nestjs/swagger` would document by default (its status, without
 * content), unless its controller documents that status. Once the module
 * adds responses to a route, `@nestjs/swagger` no longer infers these.
 */
function ownResponses(
  swagger: Swagger,
  controller: Type,
  method: string,
  handler: object,
): Record<string, ResponseEntry> {
  const own = Reflect.getMetadata(swagger.DECORATORS.API_RESPONSE, handler) as
    Record<string, ResponseEntry> | undefined;
  if (own) {
    return { ...own };
  }
  const factory = (controller as unknown as Record<string, unknown>)[
    PLUGIN_METADATA_FACTORY
  ];
  const inferred =
    typeof factory === 'function'
      ? (factory as () => Record<string, Record<string, unknown>>)()[method]
      : undefined;
  // The plugin's summary, tags and deprecation are not responses.
  const response: Record<string, unknown> = { ...inferred };
  const status = response.status as number | undefined;
  for (const name of ['summary', 'deprecated', 'tags', 'status']) {
    delete response[name];
  }
  const code = (status as number | undefined) ?? defaultStatus(handler);
  const inherited = Reflect.getMetadata(
    swagger.DECORATORS.API_RESPONSE,
    controller,
  ) as Record<string, ResponseEntry> | undefined;
  if (Object.keys(response).length === 0 && inherited?.[code]) {
    return {};
  }
  return { [code]: { description: '', ...response } };
}

/**
 * Documents one decorated route: the key header (unless the route takes its
 * key elsewhere, or documents the header itself) and the module's answers.
 * A status the route (or its controller) documents already keeps its own
 * entry, with the module's case added to its description.
 */
function documentRoute(
  swagger: Swagger,
  controller: Type,
  method: string,
  options: ResolvedRouteOptions,
  names: Names,
): void {
  const prototype = controller.prototype as Record<string, object>;
  const handler = prototype[method];
  const { DECORATORS } = swagger;
  if (!documented.has(handler)) {
    documented.set(handler, {
      parameters: Reflect.getMetadata(DECORATORS.API_PARAMETERS, handler),
      responses: Reflect.getMetadata(DECORATORS.API_RESPONSE, handler),
      keys: DECORATORS,
    });
  }
  if (!options.key) {
    const isKeyHeader = (parameter: Parameter) =>
      parameter.in === 'header' &&
      parameter.name?.toLowerCase() === names.header.toLowerCase();
    const own = (Reflect.getMetadata(DECORATORS.API_PARAMETERS, handler) ??
      []) as Parameter[];
    const documented = [
      ...own,
      ...((Reflect.getMetadata(DECORATORS.API_HEADERS, controller) ??
        []) as Parameter[]),
    ].some(isKeyHeader);
    if (own.some(isKeyHeader)) {
      // The route's own words, with the expiration policy after them.
      Reflect.defineMetadata(
        DECORATORS.API_PARAMETERS,
        own.map((parameter) =>
          isKeyHeader(parameter)
            ? {
                ...parameter,
                description: [
                  asSentence(parameter.description),
                  expiryPolicy(options, names),
                ]
                  .filter(Boolean)
                  .join(' '),
              }
            : parameter,
        ),
        handler,
      );
    } else if (!documented) {
      swagger.ApiHeader(keyHeader(options, names))(
        prototype,
        method,
        Object.getOwnPropertyDescriptor(prototype, method)!,
      );
    }
  }
  const inherited = (Reflect.getMetadata(DECORATORS.API_RESPONSE, controller) ??
    {}) as Record<string, ResponseEntry>;
  const responses = ownResponses(swagger, controller, method, handler);
  for (const [status, entry] of Object.entries(responses)) {
    if (status.startsWith('2')) {
      const headers = entry.headers as Record<string, unknown> | undefined;
      responses[status] = {
        ...entry,
        headers: { ...replayHeaders(names), ...headers },
      };
    }
  }
  for (const [status, entry] of Object.entries(
    moduleResponses(options, names),
  )) {
    const theirs = responses[status] ?? inherited[status];
    responses[status] = theirs
      ? {
          ...theirs,
          description: [theirs.description, entry.description]
            .filter(Boolean)
            .join('\n\n'),
        }
      : entry;
  }
  Reflect.defineMetadata(DECORATORS.API_RESPONSE, responses, handler);
}

/** A class of the application. */
type Type = abstract new (...args: never[]) => unknown;

/**
 * The OpenAPI metadata of each handler the module documented, as the
 * application declared it. The metadata lives on the class: another
 * application of the same classes in the process (tests create many) starts
 * again from it instead of documenting the module's part twice.
 */
const documented = new Map<
  object,
  { parameters: unknown; responses: unknown; keys: Swagger['DECORATORS'] }
>();

/**
 * The methods the module defined on a controller's prototype: each
 * delegates to the route method the controller inherits, so that the
 * module documents the route of this controller alone (`@nestjs/swagger`
 * reads a route's metadata from its method function, which the classes
 * inheriting it share).
 */
const ownMethods: Array<{
  readonly prototype: Record<string, unknown>;
  readonly method: string;
  readonly own: object;
}> = [];

/**
 * Gives `controller` a method `method` of its own where it inherits it:
 * one that calls the inherited one, with its name and all of its metadata
 * (its route, guards, interceptors, `@Idempotent()`...), so that Nest routes
 * it as before and the module can document it without touching the other
 * classes that inherit the method.
 */
function ownMethod(controller: Type, method: string): void {
  const prototype = controller.prototype as Record<string, unknown>;
  if (Object.hasOwn(prototype, method)) {
    return;
  }
  const inherited = prototype[method] as (...args: unknown[]) => unknown;
  const own = function (this: unknown, ...args: unknown[]): unknown {
    return inherited.apply(this, args);
  };
  Object.defineProperty(own, 'name', { value: inherited.name });
  for (const key of Reflect.getOwnMetadataKeys(inherited)) {
    Reflect.defineMetadata(key, Reflect.getOwnMetadata(key, inherited), own);
  }
  Object.defineProperty(prototype, method, {
    value: own,
    writable: true,
    enumerable: false,
    configurable: true,
  });
  ownMethods.push({ prototype, method, own });
}

/**
 * Puts back the metadata of every handler the module documented, and
 * takes away the methods it defined (see {@link ownMethod}).
 */
function restoreDeclared(): void {
  for (const { prototype, method, own } of ownMethods.splice(0)) {
    if (Object.getOwnPropertyDescriptor(prototype, method)?.value === own) {
      delete prototype[method];
    }
    documented.delete(own);
  }
  for (const [handler, { parameters, responses, keys }] of documented) {
    for (const [key, value] of [
      [keys.API_PARAMETERS, parameters],
      [keys.API_RESPONSE, responses],
    ] as const) {
      if (value === undefined) {
        Reflect.deleteMetadata(key, handler);
      } else {
        Reflect.defineMetadata(key, value, handler);
      }
    }
  }
}

/**
 * `@nestjs/swagger`, or `undefined` when the application does not have it.
 */
async function loadSwagger(): Promise<Swagger | undefined> {
  return (await loadOptionalPeer(
    '@nestjs/swagger',
    () => import('@nestjs/swagger'),
  )) as unknown as Swagger | undefined;
}

/**
 * @internal Adds the module's part to the OpenAPI document of every
 * decorated HTTP route, when `@nestjs/swagger` is installed. It runs while
 * the application is created (a provider's factory), before
 * `SwaggerModule.createDocument()` reads the routes: the lifecycle hooks run
 * later, at `listen()` or `init()`. Each controller's routes are documented
 * as its own decorators say: a decorated controller that inherits a route
 * method gets a method of its own (see {@link ownMethod}), so that the
 * other controllers inheriting it stay as they are.
 */
export const IDEMPOTENCY_OPENAPI = Symbol('IDEMPOTENCY_OPENAPI');

/** @internal The provider of {@link IDEMPOTENCY_OPENAPI}: whether it documented. */
export const idempotencyOpenApi: FactoryProvider<Promise<boolean>> = {
  provide: IDEMPOTENCY_OPENAPI,
  inject: [
    DiscoveryService,
    MetadataScanner,
    IdempotencyRoutes,
    IDEMPOTENCY_RESOLVED_OPTIONS,
  ],
  useFactory: async (
    discovery: DiscoveryService,
    scanner: MetadataScanner,
    routes: IdempotencyRoutes,
    options: ResolvedIdempotencyOptions,
  ): Promise<boolean> => {
    restoreDeclared();
    const swagger = options.openApi ? await loadSwagger() : undefined;
    if (!swagger) {
      return false;
    }
    // Each route of each controller: a method that several controllers
    // inherit is a route of each, decorated or not as each one says.
    const decorated: Array<[Type, string, ResolvedRouteOptions]> = [];
    for (const wrapper of discovery.getControllers()) {
      const controller = wrapper.metatype as Type | null;
      if (!controller?.prototype) {
        continue;
      }
      const prototype = controller.prototype as Record<string, () => unknown>;
      for (const method of scanner.getAllMethodNames(prototype)) {
        const handler = prototype[method];
        if (Reflect.getMetadata(PATH_METADATA, handler) === undefined) {
          continue;
        }
        let route;
        try {
          route = routes.get(controller, handler);
        } catch {
          // Invalid options: the explorer refuses them, naming the route.
          continue;
        }
        if (route) {
          decorated.push([controller, method, route.options]);
        }
      }
    }
    // Every inherited method gets its own before any is documented: it
    // starts from the metadata the application declared.
    for (const [controller, method] of decorated) {
      ownMethod(controller, method);
    }
    for (const [controller, method, routeOptions] of decorated) {
      documentRoute(swagger, controller, method, routeOptions, {
        header: options.headerName,
        replayed: options.replayHeaderName,
        typeBase: options.problemTypeBaseUrl,
        expires: options.expiresHeaderName,
      });
    }
    return true;
  },
};
