import { ForgetPasses, type ForgetSource } from './forget-passes.js';

/**
 * A scope's keys, as a store without a scope index finds them: each scan
 * finds them all at once; `onScan` runs before each scan from the start.
 */
function sourceOf(
  live: Set<string>,
  onScan: () => void,
): ForgetSource<string, number> {
  return {
    divisible: false,
    rows: () => 1,
    scan(_scope, position) {
      if (position === undefined) {
        onScan();
      }
      return Promise.resolve({ found: [...live], next: undefined });
    },
    remove(taken) {
      return Promise.resolve(
        taken.map(({ item }) => ({
          records: live.delete(item) ? 1 : 0,
          steps: 0,
        })),
      );
    },
  };
}

describe('ForgetPasses', () => {
  it('ends on a scope that keeps getting requests: after its third pass, having deleted every key there was when it began', async () => {
    const live = new Set<string>();
    let written = 0;
    const write = () => {
      written += 1;
      live.add(`k${written}`);
    };
    for (let i = 0; i < 5; i += 1) {
      write();
    }
    const before = [...live];
    // A request of the scope came while each pass before it ran.
    const passes = new ForgetPasses(sourceOf(live, write));
    let batches = 0;
    let more = true;
    while (more && batches < 100) {
      batches += 1;
      ({ more } = await passes.batch('tenant', 2));
    }
    expect(more).toBe(false);
    // Three scans from the start, each finding one key written since.
    expect(written).toBe(5 + 3);
    expect(before.filter((key) => live.has(key))).toEqual([]);
    // The key written as the last pass began is gone too; none is left.
    expect(live.size).toBe(0);
  });

  it('ends after a pass that found nothing of the scope', async () => {
    const live = new Set(['a', 'b', 'c']);
    let scans = 0;
    const passes = new ForgetPasses(sourceOf(live, () => (scans += 1)));
    expect(await passes.batch('tenant', 10)).toEqual({
      records: 3,
      steps: 0,
      more: false,
    });
    expect(scans).toBe(2);
  });
});
