import { RunningExecutions, type RunningLink } from './running-executions.js';

class Member implements RunningLink {
  previousRunning: RunningLink | undefined = undefined;
  nextRunning: RunningLink | undefined = undefined;
  isRunning = false;
  constructor(readonly name: string) {}
}

const names = (running: RunningExecutions<Member>) =>
  running.toArray().map((member) => member.name);

describe('RunningExecutions', () => {
  it('keeps its members in the order they were added, each once', () => {
    const running = new RunningExecutions<Member>();
    const [a, b, c] = ['a', 'b', 'c'].map((name) => new Member(name));
    running.add(a);
    running.add(b);
    running.add(c);
    running.add(b);
    expect(names(running)).toEqual(['a', 'b', 'c']);
    expect(running.size).toBe(3);
    expect([a, b, c].map((member) => running.has(member))).toEqual([
      true,
      true,
      true,
    ]);
  });

  it('deletes the first, a middle and the last member, and only members', () => {
    const running = new RunningExecutions<Member>();
    const members = ['a', 'b', 'c', 'd', 'e'].map((name) => new Member(name));
    members.forEach((member) => running.add(member));
    const [a, b, c, d, e] = members;
    expect(running.delete(c)).toBe(true);
    expect(names(running)).toEqual(['a', 'b', 'd', 'e']);
    expect(running.delete(a)).toBe(true);
    expect(names(running)).toEqual(['b', 'd', 'e']);
    expect(running.delete(e)).toBe(true);
    expect(names(running)).toEqual(['b', 'd']);
    expect(running.delete(c)).toBe(false);
    expect(running.delete(new Member('never added'))).toBe(false);
    expect(running.size).toBe(2);
    expect(running.has(c)).toBe(false);
    running.add(a);
    expect(names(running)).toEqual(['b', 'd', 'a']);
    expect(running.delete(b)).toBe(true);
    expect(running.delete(d)).toBe(true);
    expect(running.delete(a)).toBe(true);
    expect(names(running)).toEqual([]);
    expect(running.size).toBe(0);
    running.add(e);
    expect(names(running)).toEqual(['e']);
  });

  it('clears the links of a member that leaves, so that it holds no other', () => {
    const running = new RunningExecutions<Member>();
    const [a, b, c] = ['a', 'b', 'c'].map((name) => new Member(name));
    [a, b, c].forEach((member) => running.add(member));
    running.delete(b);
    expect(b.previousRunning).toBeUndefined();
    expect(b.nextRunning).toBeUndefined();
    expect(a.nextRunning).toBe(c);
    expect(c.previousRunning).toBe(a);
  });

  it('gives a copy: members deleted while it is walked stay in it', () => {
    const running = new RunningExecutions<Member>();
    const members = ['a', 'b', 'c'].map((name) => new Member(name));
    members.forEach((member) => running.add(member));
    const copy = running.toArray();
    for (const member of copy) {
      running.delete(member);
    }
    expect(copy.map((member) => member.name)).toEqual(['a', 'b', 'c']);
    expect(running.size).toBe(0);
  });
});
