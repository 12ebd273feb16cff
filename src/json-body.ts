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

/** Why a body whose bytes are not UTF-8 is refused. */
export const NOT_UTF8_MESSAGE =
  'body is not UTF-8: send the JSON in UTF-8 (JSON text is UTF-8, RFC 8259)';

const utf8 = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true });

/**
 * The body as text, or undefined when its bytes are not UTF-8: decoding them leniently would
 * store U+FFFD in place of whatever the sender meant (a customer's name, say).
 */
export function utf8Text(body: Buffer): string | undefined {
  try {
    return utf8.decode(body);
  } catch {
    return undefined;
  }
}
