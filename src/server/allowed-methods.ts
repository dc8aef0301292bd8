/**
 * Which HTTP methods each registered path serves, so a known path asked with another method gets 405 with an
 * `Allow` header (RFC 9110 section 15.5.6; vLLM answers 405 "Method Not Allowed") instead of fastify's 404.
 */

/** Paths → methods, filled from fastify's `onRoute` hook (which also reports the automatic HEAD routes). */
export class RouteMethods {
  private readonly byPath = new Map<string, Set<string>>();

  /** Record that `url` (a route path, no query) serves `method` (one method or several). */
  add(url: string, method: string | readonly string[]): void {
    let set = this.byPath.get(url);
    if (set === undefined) {
      set = new Set();
      this.byPath.set(url, set);
    }
    for (const m of typeof method === 'string' ? [method] : method) set.add(m.toUpperCase());
  }

  /**
   * The `Allow` header value for the path of `requestUrl` (query string ignored), e.g. `'GET, HEAD'`, or null when
   * no route has that path (a real 404). Methods are listed in a fixed order (GET, HEAD, POST, then the rest sorted).
   */
  allowFor(requestUrl: string): string | null {
    const q = requestUrl.indexOf('?');
    const set = this.byPath.get(q === -1 ? requestUrl : requestUrl.slice(0, q));
    if (set === undefined || set.size === 0) return null;
    const order = ['GET', 'HEAD', 'POST'];
    const rank = (m: string) => (order.includes(m) ? order.indexOf(m) : order.length);
    return [...set].sort((a, b) => rank(a) - rank(b) || a.localeCompare(b)).join(', ');
  }
}
