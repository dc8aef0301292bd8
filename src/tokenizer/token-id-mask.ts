/**
 * The token ids of a tokenizer as a byte mask, for the engine client's check of every token id an engine sends
 * (src/engine-client/output-contract.ts, issue 26 part 4): `mask[id] === 1` exactly for the ids
 * `GatewayTokenizer.isTokenId` accepts, so one typed-array read per token answers "is this a token id?" (an index that
 * is negative, fractional, NaN or past the end reads `undefined`).
 */
import { TOKEN_VALID, type TokenTextTable } from './token-text-table.js';

/** What the mask is built from (a `GatewayTokenizer` satisfies it). */
export interface TokenIdSource {
  readonly vocabSize: number;
  readonly tokenTextTable: TokenTextTable | null;
  isTokenId(id: unknown): boolean;
}

/**
 * A fresh `Uint8Array` of `vocabSize` bytes, 1 for each token id, 0 for an id the vocabulary skips. From the
 * detokenizer's table when there is one (no call per id), else one `isTokenId` per id (once, at start-up).
 */
export function tokenIdMask(tokenizer: TokenIdSource): Uint8Array {
  const mask = new Uint8Array(tokenizer.vocabSize);
  const flags = tokenizer.tokenTextTable?.flags ?? null;
  for (let id = 0; id < mask.length; id++) {
    const valid = flags !== null ? ((flags[id] ?? 0) & TOKEN_VALID) !== 0 : tokenizer.isTokenId(id);
    if (valid) mask[id] = 1;
  }
  return mask;
}
