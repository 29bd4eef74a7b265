import { messageOf } from './error-message.js';

describe('messageOf', () => {
  it.each([
    ['an Error', new TypeError('bad'), 'bad'],
    ['an object with a message', { message: 'like one' }, 'like one'],
    ['undefined', undefined, 'undefined'],
    ['null', null, 'null'],
    ['a string', 'plain', 'plain'],
    ['a number', 42, '42'],
    ['a symbol', Symbol('s'), 'Symbol(s)'],
    [
      'an object whose toString throws',
      {
        toString() {
          throw new Error('no');
        },
      },
      '[object Object]',
    ],
    ['an object without a prototype', Object.create(null), '[object Object]'],
  ])('reads %s without throwing', (_what, error, message) => {
    expect(messageOf(error)).toBe(message);
  });
});
