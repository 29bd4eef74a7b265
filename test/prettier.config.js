/** Prettier settings shared by `npm run lint` and `npm run format`. */
export default {
  singleQuote: true,
  trailingComma: 'all',
};
