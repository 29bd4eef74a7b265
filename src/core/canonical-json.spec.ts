import { runInNewContext } from 'node:vm';
import { canonicalJson } from './canonical-json.js';

describe('canonicalJson', () => {
  it('writes plain JSON values as JSON, the keys of every object in code-point order', () => {
    const body = JSON.parse(
      '{"b":[1,{"y":2,"x":"é"}],"a":null,"c":true,"d":-1.5e-7}',
    ) as unknown;
    expect(canonicalJson(body)).toBe(
      '{"a":null,"b":[1,{"x":"é","y":2}],"c":true,"d":-1.5e-7}',
    );
    // Objects without a prototype (multer's body, `qs` with `plainObjects`),
    // whose prototype has none (Fastify's query and form bodies), or of
    // another realm, are plain objects as well.
    const empty = function Empty() {};
    empty.prototype = Object.create(null) as object;
    const dictionary = Object.assign(
      new (empty as unknown as new () => object)(),
      {
        a: 1,
      },
    );
    for (const plain of [
      Object.assign(Object.create(null) as object, { a: 1 }),
      dictionary,
      runInNewContext('({ a: 1 })') as object,
    ]) {
      expect(canonicalJson(plain)).toBe('{"a":1}');
    }
  });

  it("writes what no JSON parser gives, marked: a toJSON()'s value, a Map's entries, a Set's values, a class instance's own fields", () => {
    class Money {
      constructor(
        readonly amount: number,
        readonly note?: string,
      ) {}
    }
    class Self {
      a = 1;
      toJSON() {
        return this;
      }
    }
    expect(
      canonicalJson({
        at: new Date(0),
        bytes: Buffer.from('a'),
        map: new Map<unknown, unknown>([
          ['b', 1],
          [{ k: 1 }, [2]],
        ]),
        set: new Set([2, 1]),
        money: new Money(5),
        self: new Self(),
        realm: runInNewContext('new Map([["a", 1]])') as unknown,
      }),
    ).toBe(
      '{"at":@"Date"("1970-01-01T00:00:00.000Z"),' +
        '"bytes":@"Buffer"({"data":[97],"type":"Buffer"}),' +
        '"map":Map([["b",1],[{"k":1},[2]]]),' +
        '"money":#"Money"({"amount":5}),' +
        '"realm":Map([["a",1]]),' +
        '"self":@"Self"(#"Self"({"a":1})),' +
        '"set":Set([2,1])}',
    );
  });

  it('writes a reference back to an object being written (a cycle) as ^ and how far up it is, at any depth, and ends', () => {
    const node: Record<string, unknown> = { a: 1 };
    node.self = node;
    const list: unknown[] = [node];
    node.list = list;
    const map = new Map<string, unknown>([['k', node]]);
    node.map = map;
    // Shared but not cyclic: written twice, as JSON writes it.
    const shared = { s: 1 };
    const value = { node, twice: [shared, shared] };
    const text =
      '{"node":{"a":1,"list":[^2],"map":Map([["k",^3]]),"self":^1},"twice":[{"s":1},{"s":1}]}';
    expect(canonicalJson(value)).toBe(text);
    let deep: unknown = value;
    for (let i = 0; i < 40; i += 1) {
      deep = [deep];
    }
    expect(canonicalJson(deep)).toBe('['.repeat(40) + text + ']'.repeat(40));
    // A cycle through the outermost object, past the recursion's depth.
    const ring: unknown[] = [];
    let inner: unknown[] = ring;
    for (let i = 0; i < 40; i += 1) {
      const next: unknown[] = [];
      inner.push(next);
      inner = next;
    }
    inner.push(ring);
    expect(canonicalJson(ring)).toBe('['.repeat(41) + '^41' + ']'.repeat(41));
    // Another cyclic shape writes another text.
    const other: Record<string, unknown> = { a: 1 };
    other.self = { back: other };
    expect(canonicalJson(other)).toBe('{"a":1,"self":{"back":^2}}');
  });

  it('writes the same text at any depth (a stack of its own past 32 levels)', () => {
    class Money {
      amount = 5;
    }
    const value = {
      at: new Date(0),
      map: new Map([['a', new Set([new Money()])]]),
    };
    const text =
      '{"at":@"Date"("1970-01-01T00:00:00.000Z"),"map":Map([["a",Set([#"Money"({"amount":5})])]])}';
    expect(canonicalJson(value)).toBe(text);
    let deep: unknown = value;
    for (let i = 0; i < 40; i += 1) {
      deep = [deep];
    }
    expect(canonicalJson(deep)).toBe('['.repeat(40) + text + ']'.repeat(40));
  });
});
