/** @internal What {@link RunningExecutions} links its members through. */
export interface RunningLink {
  /** The member before this one, while it runs. */
  previousRunning: RunningLink | undefined;
  /** The member after this one, while it runs. */
  nextRunning: RunningLink | undefined;
  /** Whether it is a member. */
  isRunning: boolean;
}

/**
 * @internal The attempts of an instance that hold a claim: a doubly linked
 * list through fields of its members, with a `Set`'s operations in constant
 * time. A `Set` of them, added to and deleted from with every request (its
 * table reallocated as it grows and shrinks), kept part of every request's
 * objects alive past the young generation's collections, to be promoted and
 * left for a full one (see test/bench/README.md). A member's links are
 * cleared when it leaves, so that nothing of a finished request stays
 * reachable through another.
 */
export class RunningExecutions<T extends RunningLink> {
  private first: T | undefined;
  private last: T | undefined;
  private count = 0;

  get size(): number {
    return this.count;
  }

  add(member: T): void {
    if (member.isRunning) {
      return;
    }
    member.isRunning = true;
    member.previousRunning = this.last;
    member.nextRunning = undefined;
    if (this.last) {
      this.last.nextRunning = member;
    } else {
      this.first = member;
    }
    this.last = member;
    this.count += 1;
  }

  has(member: T): boolean {
    return member.isRunning;
  }

  delete(member: T): boolean {
    if (!member.isRunning) {
      return false;
    }
    const { previousRunning: previous, nextRunning: next } = member;
    if (previous) {
      previous.nextRunning = next;
    } else {
      this.first = next as T | undefined;
    }
    if (next) {
      next.previousRunning = previous;
    } else {
      this.last = previous as T | undefined;
    }
    member.previousRunning = undefined;
    member.nextRunning = undefined;
    member.isRunning = false;
    this.count -= 1;
    return true;
  }

  /** The members, in the order they were added: a copy. */
  toArray(): T[] {
    const members: T[] = [];
    for (let member = this.first; member;) {
      members.push(member);
      member = member.nextRunning as T | undefined;
    }
    return members;
  }
}
