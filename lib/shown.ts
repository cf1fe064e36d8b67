// shown.ts — how an error message shows a value read from untrusted input (a plan file, a table spec):
// short and safe whatever the value — a long string cut, an array or object named by its kind and size,
// never serialised (a deeply nested or huge one would overflow the stack or make the message as large).

/** Characters of a string value an error message shows. */
const SHOWN_CHARS = 64;

/** The value as an error message shows it: numbers as written (Infinity, NaN), strings quoted and cut. */
export function shown(v: unknown): string {
  switch (typeof v) {
    case 'string':
      return v.length > SHOWN_CHARS ? `${JSON.stringify(v.slice(0, SHOWN_CHARS))}… (${v.length} characters)` : JSON.stringify(v);
    case 'number':
    case 'boolean':
    case 'undefined':
      return String(v);
    case 'bigint':
      return `${v}n`;
    case 'symbol':
      return 'a symbol';
    case 'function':
      return 'a function';
    default:
      return v === null ? 'null' : Array.isArray(v) ? `an array of ${v.length} item${v.length === 1 ? '' : 's'}` : 'an object';
  }
}
