/**
 * The sim's "model": deterministic, readable token streams. A small built-in English corpus is tokenized once with
 * the gateway's tokenizer (so the ids decode back to the same text through the real detokenizer); each request then
 * walks a seeded sequence of corpus sentences and, unless told not to stop, ends with an EOS token after a seeded
 * number of sentences.
 *
 * Determinism: the PRNG is seeded from the request's sampling seed (TokenSpeed finalization fills a nil seed with
 * CRC-32 of the rid, engine-wire.md 4.5) mixed with a hash of the prompt token ids, so the same seed and the same
 * prompt give the same tokens, and a different prompt usually gives different ones.
 */
import type { StructuredConstraint } from '../protocols/types.js';
import { DEFAULT_SIM_BEHAVIOUR, planResponse, type SimModelBehaviour } from './response-plan.js';
import { Prng } from './prng.js';
import type { SampledToken, TokenSource } from './scheduler.js';

/**
 * What the text model needs from a tokenizer (`GatewayTokenizer` satisfies it). Without `decode` the model cannot
 * read prompts: it then only honours constraints and writes corpus text.
 */
export interface TextTokenizer {
  encode(text: string, opts?: { addSpecialTokens?: boolean }): number[];
  decode?(ids: readonly number[], opts?: { skipSpecialTokens?: boolean }): string;
  readonly eosTokenIds: readonly number[];
}

/** Prompts longer than this (tokens) are not read for tools or reasoning tags (keeps long prompts cheap). */
const MAX_READ_PROMPT_TOKENS = 32_768;

/** Prompts up to this many tokens have their decoded text remembered (`TextModel.promptText`). */
const PROMPT_TEXT_CACHE_TOKENS = 4096;

/** Decoded prompts remembered per text model (bounds the cache to about 64 × 4096 token ids). */
const PROMPT_TEXT_CACHE_ENTRIES = 64;

/** Text model options. Sentence counts are per response. */
export interface TextModelOptions {
  /** Sentences to draw from; default `DEFAULT_CORPUS`. Must be non-empty and each must encode to ≥ 1 token. */
  corpus?: readonly string[];
  /** Fewest sentences before EOS may be emitted (default 1). */
  minSentences?: number;
  /** Most sentences before EOS is emitted when stopping is allowed (default 6). */
  maxSentences?: number;
  /** Start a new paragraph ("\n\n") instead of a space before a sentence with this probability (ratio 0..1, default 0.15). */
  paragraphProbability?: number;
  /** How the model treats tools and reasoning (response-plan.ts; default Hermes tool calls, no reasoning). */
  behaviour?: SimModelBehaviour;
}

/** A built-in corpus of plain English sentences (written for this project). */
export const DEFAULT_CORPUS: readonly string[] = Object.freeze([
  'The gateway keeps one queue per rank and sends each request to the least busy one.',
  'A small model can answer quickly when the batch is not too large.',
  'Every token that leaves the engine travels back through the same socket.',
  'The weather this morning was cool and clear, with a light wind from the west.',
  'She opened the window and listened to the birds in the garden.',
  'Good tests are short, fast, and tell you exactly what went wrong.',
  'The river runs past the old mill and turns slowly toward the sea.',
  'He wrote the numbers on a card and put it in his pocket.',
  'Most of the work happens before anyone notices that it was needed.',
  'A cache saves time only when the same data is asked for again.',
  'The train left the station a few minutes late but arrived on time.',
  'Reading the logs carefully often shows the answer in the first line.',
  'They planted tomatoes, beans and a row of sunflowers along the fence.',
  'When the queue grows, new requests wait a little longer for their first token.',
  'The library closes at six, so we should leave before it gets dark.',
  'Simple designs are easier to change when the requirements move.',
  'The cat slept on the warm stones next to the kitchen door.',
  'Each step of the scheduler decodes one more token for every running request.',
  'We measured the latency twice and the second run was a bit faster.',
  'The mountain path is steep at first and then follows a quiet valley.',
  'A clear error message saves an hour of guessing.',
  'The bakery on the corner sells fresh bread every morning.',
  'Memory is shared, so one long request can slow down many short ones.',
  'The children built a small boat out of wood and painted it blue.',
  'Numbers alone do not explain a result; the method matters too.',
  'The meeting moved to Thursday because half of the team was away.',
  'Light rain started in the afternoon and stopped just before sunset.',
  'Every answer ends when the model decides it has said enough.',
  'The old bridge was repaired last year and is open to bicycles again.',
  'Careful people write down what they changed and why.',
  'The market was busy, and the smell of coffee filled the street.',
  'A fair scheduler gives every request its turn without long pauses.',
  'The phone rang twice, but nobody in the office picked it up.',
  'Small steps, taken every day, add up to a long journey.',
  'The museum shows maps that are more than three hundred years old.',
  'Good defaults mean that most users never have to read the manual.',
  'The lake was so still that the trees looked twice as tall.',
  'After dinner they talked about books, music and the coming summer.',
  'The report was short, but every sentence in it was useful.',
  'Snow covered the fields, and the road to the village was quiet.',
]);

/** FNV-1a over 32 bits, fed with the bytes of each integer (little-endian, 4 bytes). */
function hashTokens(ids: readonly number[]): number {
  let h = 0x811c9dc5;
  for (const id of ids) {
    let v = id >>> 0;
    for (let i = 0; i < 4; i++) {
      h ^= v & 0xff;
      h = Math.imul(h, 0x01000193) >>> 0;
      v >>>= 8;
    }
  }
  return h >>> 0;
}

/** The low 32 bits of an integer seed (negative and huge seeds included; a fraction is truncated). */
export function seedToUint32(seed: number | bigint): number {
  const b = typeof seed === 'bigint' ? seed : BigInt(Number.isFinite(seed) ? Math.trunc(seed) : 0);
  return Number(BigInt.asUintN(32, b));
}

interface EncodedSentence {
  /** Tokens of " <sentence>" (continuation after a space). */
  spaced: number[];
  /** Tokens of "<sentence>" (first sentence of a response). */
  bare: number[];
  /** Tokens of "\n\n<sentence>" (new paragraph). */
  paragraph: number[];
}

/**
 * Generates readable token streams from a tokenized corpus. Construct once per process (tokenizing the corpus takes
 * a few ms); `createSource()` per request. Throws `Error` on an empty corpus, a sentence that encodes to no tokens, or
 * a tokenizer without EOS ids.
 */
export class TextModel {
  readonly eosTokenId: number;
  private readonly sentences: EncodedSentence[];
  private readonly minSentences: number;
  private readonly maxSentences: number;
  private readonly paragraphProbability: number;
  private readonly behaviour: SimModelBehaviour;
  private readonly tokenizer: TextTokenizer;
  /** Distinct token ids of the corpus: the candidates a vLLM rank reports for top logprobs. */
  readonly candidatePool: readonly number[];
  /** Decoded prompts by their comma-joined ids, least recently used first (`promptText`). */
  private readonly promptTexts = new Map<string, string>();

  constructor(tokenizer: TextTokenizer, opts: TextModelOptions = {}) {
    this.tokenizer = tokenizer;
    this.behaviour = opts.behaviour ?? DEFAULT_SIM_BEHAVIOUR;
    const corpus = opts.corpus ?? DEFAULT_CORPUS;
    if (corpus.length === 0) throw new Error('TextModel: empty corpus');
    const eos = tokenizer.eosTokenIds[0];
    if (eos === undefined) throw new Error('TextModel: the tokenizer has no EOS token id');
    this.eosTokenId = eos;
    const enc = (t: string): number[] => tokenizer.encode(t, { addSpecialTokens: false });
    this.sentences = corpus.map((s, i) => {
      const e = { spaced: enc(` ${s}`), bare: enc(s), paragraph: enc(`\n\n${s}`) };
      if (e.bare.length === 0 || e.spaced.length === 0 || e.paragraph.length === 0) {
        throw new Error(`TextModel: corpus sentence ${i} encodes to no tokens`);
      }
      return e;
    });
    this.minSentences = Math.max(1, Math.trunc(opts.minSentences ?? 1));
    this.maxSentences = Math.max(this.minSentences, Math.trunc(opts.maxSentences ?? 6));
    this.paragraphProbability = Math.min(1, Math.max(0, opts.paragraphProbability ?? 0.15));
    this.candidatePool = [...new Set(this.sentences.flatMap((e) => e.spaced))];
  }

  /**
   * The prompt as text (special tokens kept), '' without a decoding tokenizer or beyond `MAX_READ_PROMPT_TOKENS`.
   * Prompts up to `PROMPT_TEXT_CACHE_TOKENS` are remembered (the last `PROMPT_TEXT_CACHE_ENTRIES`, by their ids):
   * clients resend the same system prompts and chat templates, and decoding is a per-request cost of every rank.
   */
  private promptText(ids: readonly number[]): string {
    if (this.tokenizer.decode === undefined || ids.length > MAX_READ_PROMPT_TOKENS) return '';
    if (ids.length > PROMPT_TEXT_CACHE_TOKENS) return this.tokenizer.decode(ids, { skipSpecialTokens: false });
    const key = ids.join(',');
    let text = this.promptTexts.get(key);
    if (text === undefined) {
      text = this.tokenizer.decode(ids, { skipSpecialTokens: false });
      if (this.promptTexts.size >= PROMPT_TEXT_CACHE_ENTRIES)
        this.promptTexts.delete(this.promptTexts.keys().next().value as string);
    } else this.promptTexts.delete(key); // re-inserted below: most recently used last
    this.promptTexts.set(key, text);
    return text;
  }

  /**
   * A token source for one request. `seed` is the finalized sampling seed (number or bigint; only its low 32 bits
   * are used); the prompt is hashed into it. The response follows `planResponse` (response-plan.ts): a fixed text
   * (a constrained document or tool calls) then EOS, or corpus sentences after an optional prefix (a reasoning
   * block, a quoted tool result). `constraint` is the request's structured-output constraint (null: none). A fixed
   * text that ends before the request may stop (`min_tokens`) continues with corpus text.
   */
  createSource(
    seed: number | bigint,
    promptTokenIds: readonly number[],
    constraint: StructuredConstraint | null = null,
  ): TokenSource {
    const prng = new Prng((seedToUint32(seed) ^ hashTokens(promptTokenIds)) >>> 0);
    const promptText = this.promptText(promptTokenIds);
    const plan = planResponse(promptText, constraint, this.behaviour, prng);
    const planned = plan.kind === 'fixed' ? plan.text : plan.prefix;
    const fixed = planned === '' ? [] : this.tokenizer.encode(planned, { addSpecialTokens: false });
    const target = prng.int(this.minSentences, this.maxSentences);
    const logSentenceChoice = -Math.log(this.sentences.length);
    let done = 0;
    let current: number[] = fixed;
    let pos = 0;
    let corpusStarted = false;
    const startSentence = (): void => {
      const s = this.sentences[prng.int(0, this.sentences.length - 1)];
      current =
        !corpusStarted && fixed.length === 0
          ? s.bare
          : prng.next() < this.paragraphProbability
            ? s.paragraph
            : s.spaced;
      corpusStarted = true;
      pos = 0;
    };
    return {
      next: ({ allowStop }): SampledToken => {
        if (pos >= current.length) {
          if (corpusStarted && current.length > 0) done += 1;
          const finished = plan.kind === 'fixed' ? !corpusStarted || done >= 1 : done >= target;
          if (allowStop && finished) return { tokenId: this.eosTokenId, logprob: -0.01 };
          startSentence();
        }
        const tokenId = current[pos];
        const logprob = pos === 0 ? logSentenceChoice : -0.5 * prng.next();
        pos += 1;
        return { tokenId, logprob };
      },
    };
  }
}
