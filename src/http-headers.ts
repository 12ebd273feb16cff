// Header values as clients wrote them.

/**
 * A header value as the client wrote it: Node reads header bytes as Latin-1, and clients (curl,
 * Standard Webhooks libraries, which sign the id as UTF-8) send UTF-8. Bytes that are not UTF-8
 * stay as read.
 */
export function utf8Header(value: string | undefined): string | undefined {
  if (value === undefined || [...value].every((char) => char.charCodeAt(0) < 0x80)) return value;
  const bytes = Buffer.from(value, 'latin1');
  try {
    return new TextDecoder('utf-8', { fatal: true }).decode(bytes);
  } catch {
    return value;
  }
}
