/**
 * `n > 1` fan-out helpers (gateway.md section 10): per-sub-request seeds and engine ids. The sub-requests' events are
 * merged by generation-run.ts.
 */

/** Largest `n` the gateway accepts (vLLM has no hard cap; each choice is its own engine request). */
export const MAX_N = 128;

/**
 * Engine request ids of the n sub-requests: the response id itself when n = 1, else `<id>-<i>` for i = 0..n−1
 * (gateway.md 10; SMG test `fan_out_splits_n_into_single_sample_requests`).
 */
export function subRequestIds(requestId: string, n: number): string[] {
  if (n === 1) return [requestId];
  return Array.from({ length: n }, (_, i) => `${requestId}-${i}`);
}

/**
 * The seed of sub-request `i`: `seed + i`, wrapping inside the accepted seed range [0, 2^53) (gateway.md 10: copying
 * the seed unchanged would make all n choices identical, vLLM #11953); null stays null (each sub-request then samples
 * independently: vLLM draws its own, TokenSpeed derives one from the distinct sub-request id).
 */
export function subRequestSeed(seed: number | null, i: number): number | null {
  if (seed === null) return null;
  const room = Number.MAX_SAFE_INTEGER - seed;
  return i <= room ? seed + i : i - room - 1;
}
