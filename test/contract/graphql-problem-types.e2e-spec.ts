import {
  send,
  startTestApp,
  type Platform,
  type TestApp,
} from '../utils/test-app.js';
import {
  describeGraphqlServers,
  graphqlTestModule,
  type GraphqlDriver,
} from '../graphql/graphql.module.js';

const DOCS = 'https://docs.example.com/errors/';

interface GraphqlErrors {
  errors?: Array<{ extensions?: Record<string, unknown> }>;
}

/** `problemTypeBaseUrl` on one GraphQL server and HTTP platform. */
function problemTypes(driver: GraphqlDriver, platform: Platform): void {
  let target: TestApp;
  beforeAll(async () => {
    target = await startTestApp({
      platform,
      imports: [await graphqlTestModule(driver)],
      idempotency: { gc: false, problemTypeBaseUrl: DOCS },
    });
  });
  afterAll(() => target.close());

  const extensionsOf = async (query: string, key?: string) => {
    const response = await send(target, '/graphql', { key, body: { query } });
    const body = (await response.json()) as GraphqlErrors;
    return body.errors?.[0]?.extensions;
  };

  it('points the type in the extensions at the documentation, and keeps the codes', async () => {
    const reference = `${driver}-${platform}-typed`;
    expect(
      await extensionsOf(
        `mutation { placeOrder(reference: "${reference}") { id } }`,
      ),
    ).toMatchObject({
      code: 'IDEMPOTENCY_KEY_MISSING',
      status: 400,
      type: `${DOCS}missing-key`,
    });
    expect(
      await extensionsOf(
        `mutation { placeOrder(reference: "${reference}") { id } }`,
        'typed-1',
      ),
    ).toBeUndefined();
    expect(
      await extensionsOf(
        `mutation { placeOrder(reference: "${reference}", note: "other") { id } }`,
        'typed-1',
      ),
    ).toMatchObject({
      code: 'IDEMPOTENCY_KEY_REUSED',
      status: 422,
      type: `${DOCS}key-reused`,
    });
  });
}

describeGraphqlServers('problemTypeBaseUrl on GraphQL', problemTypes);
