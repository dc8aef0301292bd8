/**
 * What a simulated vLLM rank returns for a pooling (`embed`) request (docs/wire/vllm-pooling.md): a deterministic
 * vector of the prompt, so tests can compare answers across ranks and runs. The "model" is a bag of tokens: each
 * token id has a fixed pseudo-random direction, and the embedding is their sum, so prompts sharing tokens point
 * the same way (cosine similarity behaves plausibly). `SIM_EMBEDDING_SIZE` elements; any smaller `dimensions` is
 * served by truncating first (a Matryoshka model), then normalizing when asked, as vLLM's embed pooler does.
 */
import { Prng } from './prng.js';

/** Elements of a simulated embedding (the "hidden size" of the simulated model). */
export const SIM_EMBEDDING_SIZE = 256;

/** The simulated embedding of `promptTokenIds`: `dimensions` elements (≤ SIM_EMBEDDING_SIZE), L2-normalized when `normalize`. */
export function simEmbedding(promptTokenIds: readonly number[], dimensions: number, normalize: boolean): Float32Array {
  const sum = new Float64Array(dimensions);
  for (const id of promptTokenIds) {
    const prng = new Prng(Math.imul(id + 1, 0x9e3779b1));
    for (let d = 0; d < dimensions; d++) sum[d]! += prng.next() * 2 - 1;
  }
  let norm = 0;
  for (let d = 0; d < dimensions; d++) norm += sum[d]! * sum[d]!;
  const scale = normalize && norm > 0 ? 1 / Math.sqrt(norm) : promptTokenIds.length > 0 ? 1 / promptTokenIds.length : 1;
  const out = new Float32Array(dimensions);
  for (let d = 0; d < dimensions; d++) out[d] = sum[d]! * scale;
  return out;
}
