// Why a JSON body is refused, in words its sender can act on.

/**
 * Fastify's JSON parser refuses a `__proto__` or `constructor` key (prototype poisoning) and
 * says the body is "not valid JSON", which it is: this says what is wrong instead.
 */
export const FORBIDDEN_KEY_MESSAGE =
  'the JSON body holds a "__proto__" or "constructor" key with a prototype, which is refused';

/** Whether `text` is JSON as JSON.parse reads it (whatever keys it holds). */
export function parsesAsJson(text: string): boolean {
  try {
    JSON.parse(text);
    return true;
  } catch {
    return false;
  }
}
