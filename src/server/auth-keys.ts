/** The constant-time API-key comparison (auth.ts checks keys with it; tenant.ts keeps the current keys in one). */
import { createHash, timingSafeEqual } from 'node:crypto';

const sha256 = (text: string): Buffer => createHash('sha256').update(text, 'utf8').digest();

/**
 * A constant-time key matcher: true when `presented` equals one of `keys`. Compares 32-byte SHA-256 digests with
 * `timingSafeEqual` against every key (no early exit), so the time taken depends on neither the presented key's
 * length nor which key matched.
 */
export function keyMatcher(keys: readonly string[]): (presented: string) => boolean {
  const digests = keys.map(sha256);
  return (presented) => {
    const d = sha256(presented);
    let ok = false;
    for (const k of digests) ok = timingSafeEqual(d, k) || ok;
    return ok;
  };
}
