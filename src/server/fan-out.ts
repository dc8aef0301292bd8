/**
 * `n > 1` fan-out helpers (gateway.md section 10): per-sub-request seeds and engine ids, and the merge of the
 * sub-requests' generation events into one stream of indexed choice events.
 */
import type { GenerationEvent } from './generation.js';

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

/** A generation event of choice `index` (0..n−1). */
export type ChoiceEvent = GenerationEvent & { index: number };

/**
 * Interleave the choices' event streams in arrival order, tagging each event with its choice index; ends after every
 * choice's terminal `finish`. The first error of any choice (an `ApiError`, or `ClientDisconnectedError`) ends the
 * merged stream with that error. Whenever the merged stream ends before every choice finished (an error, or a
 * consumer that stops iterating), `stopAll()` is called, which must make every pending read of the other choices
 * end (the callers abort the signal their `generate` runs with, so each cancels its engine stream: ABORT to its
 * rank, gateway.md 10 "abandoning the merged stream aborts every unfinished sub-request"); every unfinished choice is
 * also closed with `return()`, which cancels the stream of one suspended between events.
 */
export async function* mergeChoices(
  choices: readonly AsyncGenerator<GenerationEvent, void, undefined>[],
  stopAll: () => void,
): AsyncGenerator<ChoiceEvent, void, undefined> {
  type Pulled = { index: number; result: IteratorResult<GenerationEvent, void> };
  const pending = new Map<number, Promise<Pulled>>();
  const done = new Set<number>();
  const pull = (index: number) => {
    pending.set(index, choices[index]!.next().then((result) => ({ index, result })));
  };
  choices.forEach((_, i) => pull(i));
  try {
    while (pending.size > 0) {
      const { index, result } = await Promise.race(pending.values());
      pending.delete(index);
      if (result.done) {
        done.add(index);
        continue;
      }
      yield { ...result.value, index };
      pull(index);
    }
  } finally {
    if (done.size < choices.length) {
      stopAll();
      for (const p of pending.values()) p.catch(() => undefined);
      // A choice whose read already settled is suspended at its `yield` and no longer watches the signal: `return()`
      // runs its `finally` (cancel). For a read still in flight, `return()` queues behind it and is harmless.
      choices.forEach((c, i) => {
        if (!done.has(i)) c.return(undefined).catch(() => undefined);
      });
    }
  }
}
