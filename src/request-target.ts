// The path of an HTTP request target, as the router reads it.

/**
 * The scheme and authority of an absolute-form target (`GET http://host:3000/path`, as sent to
 * a proxy), which HTTP/1.1 servers must accept and Node passes on as written.
 */
const ABSOLUTE_FORM_ORIGIN = /^[A-Za-z][\w+.-]*:\/\/[^/?#]*/;

/**
 * The path of `target` without its query (which may hold a credential) or, in absolute form,
 * its origin (which may hold a user and password): `/` for an origin alone.
 */
export function pathOf(target: string): string {
  const path = (target.replace(ABSOLUTE_FORM_ORIGIN, '').split('?')[0] ?? '').split('#')[0] ?? '';
  return path === '' ? '/' : path;
}
